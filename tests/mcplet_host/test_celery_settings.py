"""Celery's configuration is Django's `CELERY_` settings, read once (mcplet_host.celery)."""

from django.conf import settings

from mcplet_host.celery import app


def test_celery_has_every_celery_setting_django_has():
    names = [name for name in dir(settings) if name.startswith("CELERY_")]
    assert {"CELERY_BROKER_URL", "CELERY_TASK_ACKS_LATE", "CELERY_BEAT_SCHEDULER"} <= set(names)
    for name in names:
        assert app.conf[name.removeprefix("CELERY_").lower()] == getattr(settings, name), name
    assert app.conf["CELERY_DB_REUSE_MAX"] == settings.CELERY_DB_REUSE_MAX  # Celery's Django fixup
