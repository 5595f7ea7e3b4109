"""Fixtures of the restaurant reference scenario: the backing service on a free port, an
outbox per test, in-process tool listings of the eight MCPlets, and the seeded scenario."""

import importlib
import io

import anyio
import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.test import Client as WebClient
from mcp import Client

from mcplets.restaurant import SERVERS, backend
from pools.discovery import apply_snapshot, snapshot
from pools.models import McpServer
from tests.passkey.authenticator import SoftAuthenticator

PASSKEY_ORIGIN = "https://approve.example.test"
PASSKEY_RP_ID = "approve.example.test"


@pytest.fixture(scope="session")
def backend_url():
    """The backing service, in a thread of the test process (it reads its environment, e.g.
    RESTAURANT_OUTBOX, on every request)."""
    server, url = backend.serve_in_thread()
    yield url
    server.shutdown()
    server.server_close()


@pytest.fixture
def outbox(tmp_path, monkeypatch):
    """Where the backing service writes e-mail (no SMTP_HOST) and SNS posts in this test."""
    path = tmp_path / "outbox"
    monkeypatch.setenv("RESTAURANT_OUTBOX", str(path))
    monkeypatch.delenv("SMTP_HOST", raising=False)
    monkeypatch.delenv("RESTAURANT_API_TOKEN", raising=False)
    return path


def sent_mail(path):
    return sorted(path.glob("*.eml")) if path.exists() else []


@pytest.fixture
def api(backend_url, monkeypatch):
    """In-process MCPlets call the backing service through RESTAURANT_API_URL."""
    monkeypatch.setenv("RESTAURANT_API_URL", backend_url)
    return backend_url


def module_of(info):
    return importlib.import_module(info.dotted)


async def _listing(info):
    async with Client(module_of(info).server, mode="legacy") as client:
        return await snapshot(client)


@pytest.fixture(scope="session")
def listings():
    """Each server's tools/list (+ result schemas) as discovery sees it, over in-memory MCP:
    the MCP half of discovery, once. `apply_snapshot` stores it like `discover` does."""
    return {info.name: anyio.run(_listing, info) for info in SERVERS}


def seed(*args, **options):
    out = io.StringIO()
    call_command("seed_reference", *args, stdout=out, **options)
    return out.getvalue()


@pytest.fixture
def passkey_https(settings):
    """HTTPS passkey mode on a made-up origin."""
    settings.PASSKEY_MODE = "https"
    settings.PASSKEY_ORIGIN = PASSKEY_ORIGIN
    settings.PASSKEY_RP_ID = PASSKEY_RP_ID
    settings.PASSKEY_OPEN_BROWSER = False
    return settings


@pytest.fixture
def scenario(backend_url, listings, passkey_https):
    """The seeded reference scenario (stdio servers pointed at the test backend), with every
    server's tools stored as discovery stores them."""
    seed(api_url=backend_url, verify_url="http://127.0.0.1:9/auth/verify-assertion")
    servers = {s.name: s for s in McpServer.objects.filter(name__startswith="restaurant-")}
    for name, tools in listings.items():
        apply_snapshot(servers[name].pk, tools)
    from agents.models import Agent

    agents = {a.agent_id: a for a in Agent.objects.all()}
    return {"servers": servers, **agents}


@pytest.fixture
def manager(django_user_model):
    """The store manager: may approve, with a software passkey registered the usual way."""
    user = django_user_model.objects.create_user("tencho", "tencho@example.jp", "pw-manager-1")
    user.user_permissions.add(Permission.objects.get(codename="approve_ceremony"))
    client, key = WebClient(), SoftAuthenticator()
    client.force_login(django_user_model.objects.get(pk=user.pk))
    options = client.post("/passkey/register/options/").json()
    response = client.post(
        "/passkey/register/verify/",
        {"name": "store phone", "credential": key.create(options, PASSKEY_ORIGIN)},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    return client, key


def approve(manager, ceremony):
    """The manager's challenge and signed assertion, through the host's ceremony views."""
    client, key = manager
    url = f"/passkey/ceremonies/{ceremony.token}/"
    options = client.post(url + "challenge/")
    assert options.status_code == 200, options.content
    response = client.post(
        url + "assertion/",
        key.get(options.json(), PASSKEY_ORIGIN),
        content_type="application/json",
        HTTP_ORIGIN=PASSKEY_ORIGIN,
    )
    assert response.status_code == 200, response.content
