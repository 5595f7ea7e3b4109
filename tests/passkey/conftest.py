import json
import sys

import pytest
from django.contrib.auth.models import Permission
from django.core.cache import cache
from django.test import Client

from agents.models import Agent
from mcplet_host import gateway
from mcplets.examples.programmable import stdio_params, write_spec
from passkey import loopback
from passkey.models import BackendToken
from pools.discovery import discover
from pools.models import McpServer, Pool
from tests.conftest import entry
from tests.passkey.authenticator import SoftAuthenticator

ORIGIN = "https://approve.example.test"
RP_ID = "approve.example.test"
# A server's form request during a call (test_form_elicitation, e2e/test_form_browser).
SCHEMA = {
    "type": "object",
    "properties": {
        "email": {"type": "string", "format": "email", "title": "Contact e-mail"},
        "guests": {"type": "integer", "minimum": 1, "maximum": 12},
        "seating": {"type": "string", "enum": ["inside", "terrace"]},
        "vegetarian": {"type": "boolean"},
    },
    "required": ["email", "guests"],
}
ASK = {"message": "Who should the restaurant contact?", "requestedSchema": SCHEMA}
EMAIL_ARGS = {"to": ["sato@example.jp", "kim@example.kr"], "body": "Free dessert tomorrow!"}


@pytest.fixture(autouse=True)
def passkey_settings(settings):
    """HTTPS mode on a made-up origin."""
    settings.PASSKEY_MODE = "https"
    settings.PASSKEY_ORIGIN = ORIGIN
    settings.PASSKEY_RP_ID = RP_ID
    settings.PASSKEY_OPEN_BROWSER = False
    return settings


def make_approver(django_user_model, username="manager", email="manager@example.org"):
    user = django_user_model.objects.create_user(username, email, "pw-approver-1")
    user.user_permissions.add(Permission.objects.get(codename="approve_ceremony"))
    return django_user_model.objects.get(pk=user.pk)  # fresh permission cache


@pytest.fixture
def approver(django_user_model):
    return make_approver(django_user_model)


@pytest.fixture
def approver_client(approver):
    client = Client()  # its own: tests also use `client` and `staff_client`
    client.force_login(approver)
    return client


@pytest.fixture
def authenticator(approver_client):
    """A software passkey registered by the approver through the registration endpoints."""
    key = SoftAuthenticator()
    register(approver_client, key, "laptop")
    return key


def register(client, key, name, origin=ORIGIN):
    options = client.post("/passkey/register/options/").json()
    response = client.post(
        "/passkey/register/verify/",
        {"name": name, "credential": key.create(options, origin)},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    return response


def hold_email(registry, arguments=None):
    outcome = gateway.call_tool(
        registry["dispatch"], "send_email", arguments or EMAIL_ARGS, "app", "ctx-pk"
    )
    assert outcome.status == "pending"
    return outcome.ceremony


@pytest.fixture
def held(registry):
    """A strict send_email call, held for approval."""
    return hold_email(registry)


def url(ceremony, step=""):
    return f"/passkey/ceremonies/{ceremony.token}/" + (f"{step}/" if step else "")


def sign(client, ceremony, key, origin=ORIGIN, rp_id=None):
    """Ask the page's challenge endpoint, and sign what it gives."""
    response = client.post(url(ceremony, "challenge"))
    assert response.status_code == 200, response.content
    return key.get(response.json(), origin, rp_id=rp_id)


def post_assertion(client, ceremony, credential, origin=ORIGIN):
    return client.post(
        url(ceremony, "assertion"), credential, content_type="application/json", HTTP_ORIGIN=origin
    )


@pytest.fixture
def approved(approver_client, authenticator, held):
    """The held e-mail, approved with a passkey: its mcplet_auth, as the MCPlet receives it."""
    response = post_assertion(approver_client, held, sign(approver_client, held, authenticator))
    assert response.status_code == 200
    return cache.get(held.assertion_key)


@pytest.fixture
def verify_token(registry):
    token, raw = BackendToken.issue(registry["server"], "reference")
    return raw


class Log:
    def __init__(self, path):
        self.path = path

    def __call__(self):
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines()]


@pytest.fixture
def strict_mailer(tmp_path, registry):
    """`tests.passkey.strict_mailer` as a discovered stdio server; `configure(url, token)` points
    it at a verify-assertion endpoint. Yields (server, its log)."""
    log = Log(tmp_path / "mailer.jsonl")
    server = McpServer.objects.create(
        name="strict-mailer",
        transport="stdio",
        command=sys.executable,
        args=["-m", "tests.passkey.strict_mailer"],
        env={"STRICT_MAILER_LOG": str(log.path)},
    )
    discover(server)
    registry["dispatch"].refresh_from_db()
    return server, log


def configure(server, verify_url):
    """Give the MCPlet a fresh verify token and the endpoint's URL."""
    _, raw = BackendToken.issue(server, "test")
    server.env |= {"MCPLET_VERIFY_URL": verify_url, "MCPLET_VERIFY_TOKEN": raw}
    server.save(update_fields=["env"])
    return raw


@pytest.fixture(autouse=True)
def _close_loopback_pages():
    yield
    loopback.close_all()


@pytest.fixture
def asking_server(tmp_path, calls):
    """A 2025-11-25 stdio server whose `book_table` asks a form (`ask`, default ASK) during the
    call, its pool granted to a partner and an agent; returns the agent."""

    def start(ask=ASK, *others):
        tools = [entry("book_table", pool="bistro-pool") | {"elicit": ask}, *others]
        # elicitation/create during a call is 2025-11-25's shape (2026-07-28: input_required).
        command, args = stdio_params(
            write_spec(tmp_path / "tools.json", tools), calls_log=calls.path, protocols="2025"
        )
        server = McpServer.objects.create(
            name="bistro", transport="stdio", command=command, args=args
        )
        pool = Pool.objects.create(name="bistro-pool")
        discover(server)
        partner = Agent.objects.create(agent_id="partner-bot", display_name="P", kind="external")
        partner.accessible_pools.set([pool])
        agent = Agent.objects.create(agent_id="planning-agent", display_name="Planning")
        agent.accessible_pools.set([pool])
        return agent

    return start
