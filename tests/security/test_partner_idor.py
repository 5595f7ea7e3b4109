"""IDOR on another partner's tasks: reading, cancelling or resubmitting a task that is not
yours (by its messageId, in any spelling), and internal messages of the host's own bus. The
victim's task waits for the approval of send_email; nothing may decide it or run it."""

import json
import uuid

import pytest

from a2a import bus, messages
from a2a.models import A2AMessage, PartnerKey
from agents.models import Agent
from held.models import Ceremony
from tests.security.conftest import Partner

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]
EMAIL = {"to": ["sato@example.jp"], "body": "Hi"}


@pytest.fixture
def victim_task(world, partner, script):
    """The partner's task to the dispatch agent, now waiting for a person to approve an e-mail."""
    world.partner.accessible_pools.add(world.pools["media-pool"])
    world.dispatch.model = script(
        {"dispatch-agent": [{"json": {"actions": [{"tool": "send_email", "arguments": EMAIL}]}}]}
    )
    world.dispatch.save()
    body = messages.task_request("partner-bot", "dispatch-agent", {"store": "shinjuku"})
    response = partner.post("/a2a/tasks", json.dumps(body))
    assert response.status_code == 202 and response.json()["state"] == "awaiting_approval"
    return body


@pytest.fixture
def intruder(world, client):
    other = Agent.objects.create(agent_id="other-bot", kind=Agent.Kind.EXTERNAL)
    other.callable_agents.set([world.info, world.dispatch])
    other.accessible_pools.set(world.pools.values())
    _, raw = PartnerKey.issue(other, "intruder")
    return Partner(client, raw)


def spellings(message_id):
    return [message_id, message_id.upper(), message_id.replace("-", ""), f"{{{message_id}}}"]


def test_another_partners_task(victim_task, intruder, attempts):
    message_id = victim_task["messageId"]
    for spelling in spellings(message_id):
        for action, path in (("read", ""), ("cancel", "/cancel")):
            with attempts.refused(f"{action} /a2a/tasks/{spelling}", result="BLOCKED"):
                url = f"/a2a/tasks/{spelling}{path}"
                response = intruder.post(url, b"") if action == "cancel" else intruder.get(url)
                assert response.status_code == 404
    resubmitted = {**victim_task, "senderId": "other-bot"}
    with attempts.refused("its messageId resubmitted as one's own", result="BLOCKED"):
        assert intruder.post("/a2a/tasks", json.dumps(resubmitted)).status_code == 404
    with attempts.refused("its body resubmitted verbatim", result="BLOCKED"):
        assert intruder.post("/a2a/tasks", json.dumps(victim_task)).status_code == 403
    ceremony = Ceremony.objects.get()
    assert ceremony.status == Ceremony.Status.PENDING
    assert not A2AMessage.objects.filter(reply_to=message_id).exists()


def test_the_hosts_own_messages(world, partner, victim_task, attempts):
    internal = bus.send_task("planning-agent", "dispatch-agent", {"plan": "x"})
    message_id = str(internal.message_id)
    for action, path in (("read", ""), ("cancel", "/cancel")):
        with attempts.refused(f"{action} an internal message", result="BLOCKED"):
            url = f"/a2a/tasks/{message_id}{path}"
            response = partner.post(url, b"") if action == "cancel" else partner.get(url)
            assert response.status_code == 404
    body = messages.task_request("partner-bot", "dispatch-agent", {}, message_id=message_id)
    with attempts.refused("an internal messageId resubmitted", result="BLOCKED"):
        assert partner.post("/a2a/tasks", json.dumps(body)).status_code == 404
    with attempts.refused("an unknown task", result="BLOCKED"):
        assert partner.get(f"/a2a/tasks/{uuid.uuid4()}").status_code == 404
    assert set(Ceremony.objects.values_list("status", flat=True)) == {Ceremony.Status.PENDING}


def test_another_partners_conversation(world, partner, victim_task, intruder, attempts):
    """A contextId is a workflow's trace: joining another partner's, or one the host began,
    would put the intruder's tasks in their dashboard, audit trail and streams."""
    theirs = victim_task["contextId"]
    internal = str(bus.send_task("planning-agent", "dispatch-agent", {"plan": "x"}).context_id)
    for label, context in (("another partner's", theirs), ("the host's own", internal)):
        body = messages.task_request("other-bot", "info-gathering-agent", {}, context_id=context)
        with attempts.refused(f"a task into {label} contextId", result="BLOCKED"):
            response = intruder.post("/a2a/tasks", json.dumps(body))
            assert response.status_code == 400 and response.json()["error"]["path"] == "contextId"
        rpc = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": str(uuid.uuid4()),
                    "contextId": context,
                    "role": "ROLE_USER",
                    "parts": [{"data": {}}],
                }
            },
        }
        with attempts.refused(f"SendMessage into {label} contextId", result="BLOCKED"):
            answer = intruder.post("/a2a/v1/info-gathering-agent", json.dumps(rpc)).json()
            assert answer["error"]["code"] == -32602, answer
    senders = A2AMessage.objects.filter(context_id__in=[theirs, internal], external=True)
    assert set(senders.values_list("sender_id", flat=True)) == {"partner-bot"}
    # The partner's own conversation goes on.
    again = messages.task_request("partner-bot", "info-gathering-agent", {}, context_id=theirs)
    assert partner.post("/a2a/tasks", json.dumps(again)).status_code in (200, 202)
