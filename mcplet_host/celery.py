import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcplet_host.settings")

app = Celery("mcplet_host")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
