import pytest
from django.test import override_settings

from mcplet_host.celery import app

pytestmark = pytest.mark.django_db

UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1


def test_all_up(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "up" and body["down"] == []
    assert set(body["checks"]) == {"database", "broker", "cache"}


def test_broker_down_is_named(client):
    saved = app.conf.broker_url
    app.conf.broker_url = UNREACHABLE_REDIS
    try:
        response = client.get("/healthz")
    finally:
        app.conf.broker_url = saved
    assert response.status_code == 503
    body = response.json()
    assert body["down"] == ["broker"]
    assert body["checks"]["broker"]["error"]


def test_cache_down_is_named(client):
    unreachable = {
        "default": {
            "BACKEND": "mcplet_host.cache.RedisCache",
            "LOCATION": UNREACHABLE_REDIS,
        }
    }
    with override_settings(CACHES=unreachable):
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["down"] == ["cache"]


def test_only_get(client):
    assert client.post("/healthz").status_code == 405
