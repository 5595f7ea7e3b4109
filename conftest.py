"""Test-wide set-up: the `services` gate (real PostgreSQL + Redis) and shared fixtures."""

import os

import pytest

pytest_plugins = ["tests.browser", "tests.security.plugin"]

SERVICES_HINT = (
    "needs PostgreSQL and Redis: set DATABASE_URL=postgres://postgres@127.0.0.1:5432/mcplet_host "
    "and REDIS_URL=redis://127.0.0.1:6379/0 (as .ci/run does)"
)


def services_available():
    from django.conf import settings

    return settings.DATABASES["default"]["ENGINE"].endswith("postgresql") and not settings.EMBEDDED


def pytest_collection_modifyitems(config, items):
    if services_available():
        return
    marked = [item for item in items if item.get_closest_marker("services")]
    if marked and os.environ.get("CI"):
        raise pytest.UsageError(f"CI must run every test, but {len(marked)} {SERVICES_HINT}.")
    for item in marked:
        item.add_marker(pytest.mark.skip(reason=SERVICES_HINT))


def pytest_report_header(config):
    from django.conf import settings

    db = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    broker = "memory (embedded)" if settings.EMBEDDED else "redis"
    return f"mcplet-host: database={db}, broker={broker}"


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Rate-limit counters, heartbeats, assertions — and with Redis, the broker's queues — must
    not leak from one test to the next (ids are reused once a test's transaction rolls back)."""
    from django.core.cache import cache

    cache.clear()
    yield


@pytest.fixture(autouse=True)
def _close_mcp_sessions():
    """MCP sessions and localhost ceremony pages belong to the test that opened them."""
    yield
    from passkey import loopback
    from pools.sessions import sessions

    sessions.close_all()
    loopback.close_all()
