"""Partner key abuse: no key, malformed or wrong keys, revoked or expired ones, a disabled
partner, a key of an internal agent, another partner's key, and sender spoofing. A task that
got through would run the information agent, whose model calls query_crm."""

import base64
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from a2a import messages
from a2a.models import A2AMessage, PartnerKey
from agents.models import Agent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]


def task(sender="partner-bot", recipient="info-gathering-agent"):
    return json.dumps(messages.task_request(sender, recipient, {"store": "shinjuku"}))


def test_the_harness_sees_a_task_run(world, partner, info_calls_crm, mcp):
    before = len(mcp.calls())
    assert partner.post("/a2a/tasks", task()).status_code == 200
    assert [c["name"] for c in mcp.calls()[before:]] == ["query_crm"]


def test_missing_or_malformed_keys_are_401(world, partner, info_calls_crm, attempts):
    raw = world.raw_key
    headers = {
        "no header": "",
        "no key": "Bearer",
        "an empty key": "Bearer ",
        "basic auth": "Basic " + base64.b64encode(f"partner-bot:{raw}".encode()).decode(),
        "another scheme": f"Token {raw}",
        "no scheme": raw,
        "two words after the key": f"Bearer {raw} extra",
        "the key truncated": f"Bearer {raw[:-1]}",
        "the key extended": f"Bearer {raw}x",
        "the key upper-cased": f"Bearer {raw.upper()}",
        "the key's prefix only": f"Bearer {raw[:13]}",
        "an unknown key": "Bearer mcpk_" + "A" * 43,
        "the prefix of another key": f"Bearer {raw[:13]}{'B' * 30}",
    }
    for label, header in headers.items():
        with attempts.refused(label, event_type="a2a.partner.request", result="BLOCKED"):
            response = partner.post("/a2a/tasks", task(), authorization=header)
            assert response.status_code == 401, (label, response.content)
    with attempts.refused("the key in the query string", event_type="a2a.partner.request"):
        response = partner.post(f"/a2a/tasks?key={raw}", task(), authorization="")
        assert response.status_code == 401
    assert not A2AMessage.objects.exists()


def test_dead_keys_and_partners_are_401(world, partner, info_calls_crm, attempts):
    key = PartnerKey.objects.get(agent=world.partner)
    changes = {
        "a revoked key": lambda: key.revoke(),
        "an expired key": lambda: PartnerKey.objects.filter(pk=key.pk).update(
            expires_at=timezone.now() - timedelta(seconds=1), revoked_at=None
        ),
        "a disabled partner": lambda: (
            PartnerKey.objects.filter(pk=key.pk).update(expires_at=None),
            Agent.objects.filter(pk=world.partner.pk).update(enabled=False),
        ),
        "a key of an internal agent": lambda: Agent.objects.filter(pk=world.partner.pk).update(
            enabled=True, kind="internal"
        ),
    }
    for label, change in changes.items():
        change()
        with attempts.refused(label, event_type="a2a.partner.request", result="BLOCKED"):
            assert partner.post("/a2a/tasks", task()).status_code == 401, label
    assert not A2AMessage.objects.exists()


def test_spoofed_senders_and_recipients_are_403(world, partner, info_calls_crm, attempts):
    other = Agent.objects.create(agent_id="other-bot", kind=Agent.Kind.EXTERNAL)
    other.callable_agents.set([world.info])
    _, other_key = PartnerKey.issue(other, "other")
    bodies = {
        "senderId of another partner": (task(sender="other-bot"), None),
        "senderId of an internal agent": (task(sender="planning-agent"), None),
        "senderId of the Director": (task(sender="director"), None),
        "another partner's key, this partner's senderId": (task(), f"Bearer {other_key}"),
        "a recipient it may not call": (task(recipient="planning-agent"), None),
        "itself as recipient": (task(recipient="partner-bot"), None),
        "another partner as recipient": (task(recipient="other-bot"), None),
        "an unknown recipient": (task(recipient="root"), None),
    }
    for label, (body, header) in bodies.items():
        with attempts.refused(label, event_type="a2a.partner.request", result="BLOCKED"):
            assert partner.post("/a2a/tasks", body, authorization=header).status_code == 403
    assert not A2AMessage.objects.exists()
