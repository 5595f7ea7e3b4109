"""What the A2A tests share: the unmodified a2a-sdk client as the partner, and the host as
production serves it."""

import os

import httpx
import pytest

from tests.a2a_sdk import sdk
from tests.processes import celery_worker, daphne, scripts  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def peer():
    """tests/a2a_sdk/client.py in the SDK's virtualenv, one process per module."""
    client = sdk.Client()
    yield client
    client.close()


@pytest.fixture(scope="module")
def host(request, django_db_setup, django_db_blocker, scripts, tmp_path_factory):  # noqa: F811
    """daphne serving the ASGI application (pytest-django's live_server is WSGI, which cannot
    stream) and a real Celery worker, on the test database and the real Redis; a module adds
    settings in its HOST_ENVIRONMENT. Its tests use tests.processes' `script`."""
    environment = {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "MCPLET_TEST_NAMESPACE": f"{request.module.__name__}-{os.getpid()}",
        "MCPLET_SCRIPT_DIRS": str(scripts),
        "MCPLET_A2A_WAIT": "0",
        **getattr(request.module, "HOST_ENVIRONMENT", {}),
    }
    logs = tmp_path_factory.mktemp("host")
    with (
        django_db_blocker.unblock(),
        daphne(logs / "daphne.log", **environment) as url,
        celery_worker(logs / "worker.log", **environment),
    ):
        yield url


@pytest.fixture
def api(live_server, partner):
    """An HTTP client of the live server with a key of the module's `partner` (`.key`, `.raw`)."""
    from a2a.models import PartnerKey

    key, raw = PartnerKey.issue(partner, "tests")
    with httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Bearer {raw}"}, timeout=30
    ) as client:
        client.key, client.raw = key, raw
        yield client
