"""Plan §9: `send_email` sends only what the store manager approved, once. Someone who reaches the
MCPlet directly (not through the host's gateway) with a replayed assertion, or with the
assertion of another call, sends nothing: the MCPlet asks the host, the host refuses and audits
it. (Without any assertion: test_restaurant_mcplets.py, AUTH_REQUIRED.)"""

import anyio
import pytest
from mcp import Client

from held.models import Ceremony
from mcplet_host import gateway
from mcplet_host.models import AuditEvent
from mcplets.restaurant import mail
from passkey.models import REFUSED_EVENT
from tests.restaurant.conftest import approve, sent_mail

pytestmark = pytest.mark.django_db(transaction=True)

APPROVED = {
    "to": ["佐藤 花子 <sato.hanako@example.jp>"],
    "subject": "明日のご来店について",
    "body": "{name} 様、明日は雨の予報です。デザートをご用意してお待ちしております。",
}
OTHER_CALL = {**APPROVED, "to": ["everyone@example.org"], "body": "Buy now!"}


def send_email(arguments, mcplet_auth):
    async def run():
        async with Client(mail.server, mode="legacy") as client:
            return await client.call_tool(
                "send_email", arguments, meta={"mcplet_auth": mcplet_auth}
            )

    result = anyio.run(run)
    return result.structured_content.get("error", {}).get("code") if result.is_error else "SENT"


def refusals(reason):
    return AuditEvent.objects.filter(
        event_type=REFUSED_EVENT, target_tool="send_email", details__reason=reason
    ).count()


@pytest.fixture
def mailer(scenario, api, outbox, live_server, monkeypatch):
    """The mail MCPlet in this process, with the seeded server's token, verifying with the
    host on the live server."""
    for name, value in scenario["servers"]["restaurant-mail"].env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RESTAURANT_API_URL", api)
    monkeypatch.setenv("MCPLET_VERIFY_URL", f"{live_server.url}/auth/verify-assertion")
    return outbox


@pytest.fixture
def approved(scenario, manager):
    """The dispatch agent's e-mail, held and approved with the manager's passkey; no worker
    runs the continuation, so its assertion is still in the cache, unused."""
    held = gateway.call_tool(scenario["dispatch-agent"], "send_email", APPROVED, "app")
    approve(manager, held.ceremony)
    ceremony = Ceremony.objects.get(pk=held.ceremony.pk)
    assert ceremony.status == Ceremony.Status.APPROVED
    return ceremony.take_assertion()


def test_another_calls_assertion_sends_nothing(mailer, approved):
    assert send_email(OTHER_CALL, approved) == "AUTH_FAILED"
    assert sent_mail(mailer) == [] and refusals("wrong_call") == 1
    # The assertion itself was good: the approved call goes through with it.
    assert send_email(APPROVED, approved) == "SENT"
    assert len(sent_mail(mailer)) == 1


def test_a_replayed_assertion_sends_nothing(mailer, approved):
    assert send_email(APPROVED, approved) == "SENT"
    assert send_email(APPROVED, approved) == "AUTH_FAILED"
    assert len(sent_mail(mailer)) == 1 and refusals("already_used") == 1
    assert AuditEvent.objects.filter(event_type="mcplet.passkey.verified").count() == 1
