"""The local bus's refusals, proved from the MCP server's own call log (issue 14): each refused
delivery is for an agent whose model would call a tool at once, so had the delivery started a
run, the log would show it. Also the breaks that used to slip past: a disabled sender or
recipient."""

import uuid

import pytest
from django.db import connection

from a2a import bus, messages
from a2a.models import A2AMessage
from agents.models import Agent, AgentRun
from agents.tasks import deliver
from mcplet_host.authority import HOST
from mcplet_host.models import AuditEvent

pytestmark = pytest.mark.django_db

CRM = {"name": "query_crm", "arguments": {"filter": "rain"}}


@pytest.fixture
def agents(registry, script):
    """Every internal agent's model calls query_crm (pool-less) first. Deliveries are made by
    calling the worker's task here: these tests' transactions never commit, so the bus's own
    enqueue never fires."""
    turns = [{"tool_calls": [CRM]}, {"json": {"done": True}}]
    model = script({a: turns for a in ("info-gathering-agent", "planning-agent", "dispatch-agent")})
    Agent.objects.filter(kind=Agent.Kind.INTERNAL).update(model=model)
    return registry


def refused(says):
    event = AuditEvent.objects.get(event_type="a2a.message.refused")
    assert says in event.details["reason"] and event.result == "BLOCKED"


def test_the_control_a_genuine_delivery_runs_the_tool(agents, calls):
    request = bus.send_task("planning-agent", "info-gathering-agent", {"store": "shinjuku"})
    deliver(str(request.message_id), request.signature)
    assert [c["name"] for c in calls()] == ["query_crm"]
    assert AgentRun.objects.get().status == AgentRun.Status.SUCCESS


@pytest.mark.parametrize("disabled", ["planning-agent", "info-gathering-agent"])
def test_a_disabled_sender_or_recipient_is_refused(agents, calls, disabled):
    request = bus.send_task("planning-agent", "info-gathering-agent", {"store": "shinjuku"})
    Agent.objects.filter(agent_id=disabled).update(enabled=False)
    deliver(str(request.message_id), request.signature)
    refused(
        "the sender 'planning-agent' is disabled"
        if disabled == "planning-agent"
        else "the recipient 'info-gathering-agent' is disabled"
    )
    assert not AgentRun.objects.exists() and calls() == []


@pytest.mark.parametrize("disabled", ["planning-agent", "info-gathering-agent"])
def test_an_agent_disabled_after_a_delivery_is_refused_at_the_next(agents, calls, disabled):
    """A delivery keeps the agents it read with the registry (mcplet_host.registry): a change
    made by raw SQL, as another process would, is seen by the next one."""
    first = bus.send_task("planning-agent", "info-gathering-agent", {"store": "shinjuku"})
    deliver(str(first.message_id), first.signature)
    assert [c["name"] for c in calls()] == ["query_crm"]
    second = bus.send_task("planning-agent", "info-gathering-agent", {"store": "shinjuku"})
    table = connection.ops.quote_name(Agent._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET enabled = false WHERE agent_id = %s", [disabled])  # noqa: S608
    deliver(str(second.message_id), second.signature)
    refused(f"{disabled!r} is disabled")
    assert AgentRun.objects.count() == 1 and len(calls()) == 1


def test_a_refused_request_delivered_again_once_it_would_pass_runs_nothing(agents, calls):
    """Refused (its recipient disabled), then delivered again from the broker after the
    recipient is enabled: only a queued request is marked delivered and given a run."""
    request = bus.send_task("planning-agent", "info-gathering-agent", {"store": "shinjuku"})
    Agent.objects.filter(agent_id="info-gathering-agent").update(enabled=False)
    deliver(str(request.message_id), request.signature)
    refused("the recipient 'info-gathering-agent' is disabled")
    Agent.objects.filter(agent_id="info-gathering-agent").update(enabled=True)
    deliver(str(request.message_id), request.signature)
    assert not AgentRun.objects.exists() and calls() == []
    assert A2AMessage.objects.get(pk=request.pk).state == A2AMessage.State.REFUSED


def test_a_message_forged_into_the_broker(agents, calls):
    deliver(str(uuid.uuid4()), "0" * 64)
    refused("no such message was sent on this host's bus")
    assert not AgentRun.objects.exists() and calls() == []


@pytest.mark.parametrize("signature", ["", "0" * 64, "not-hex"])
def test_a_delivery_with_a_bad_signature(agents, calls, signature):
    request = bus.send_task("planning-agent", "info-gathering-agent", {"store": "shinjuku"})
    deliver(str(request.message_id), signature)
    refused(bus.FORGED)
    assert not AgentRun.objects.exists() and calls() == []


@pytest.mark.parametrize(
    "edit",
    [
        {"recipientId": "dispatch-agent"},
        {"senderId": "director"},
        {"payload": {"parameters": {"store": "shibuya"}}},
    ],
)
def test_a_message_edited_in_the_database(agents, calls, edit):
    request = bus.send_task("planning-agent", "info-gathering-agent", {"store": "shinjuku"})
    body = {**request.body, **edit}
    A2AMessage.objects.filter(pk=request.pk).update(
        body=body, recipient_id=body["recipientId"], sender_id=body["senderId"]
    )
    deliver(str(request.message_id), request.signature)
    refused("its signature does not verify")
    assert not AgentRun.objects.exists() and calls() == []


@pytest.mark.parametrize(
    ("sender", "recipient", "says"),
    [
        ("partner-bot", "info-gathering-agent", "'partner-bot' is not a registered internal"),
        ("ghost", "info-gathering-agent", "'ghost' is not a registered internal agent"),
        ("planning-agent", "partner-bot", "the recipient 'partner-bot' is not an agent"),
    ],
)
def test_a_signed_message_from_or_to_a_non_internal_agent(agents, calls, sender, recipient, says):
    request = bus.post(messages.task_request(sender, recipient, {}), HOST.then(sender))
    deliver(str(request.message_id), request.signature)
    refused(says)
    assert not AgentRun.objects.exists() and calls() == []
