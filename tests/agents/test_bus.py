"""The local bus refuses what the host did not send: forged, tampered, foreign senders."""

import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from a2a import bus, messages
from a2a.models import A2AMessage
from agents.models import AgentRun
from agents.tasks import deliver
from mcplet_host.models import AuditEvent

pytestmark = pytest.mark.django_db


def refusal():
    return AuditEvent.objects.get(event_type="a2a.message.refused")


def test_a_message_forged_into_the_broker_is_refused(registry):
    deliver(str(uuid.uuid4()), "0" * 64)
    assert "no such message was sent" in refusal().details["reason"]
    assert not AgentRun.objects.exists()


def test_an_unsigned_or_tampered_message_is_refused_and_answered(registry, director):
    request = bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})
    deliver(str(request.message_id), "")  # unsigned
    assert "signature does not verify" in refusal().details["reason"]
    response = A2AMessage.objects.get(reply_to=request.message_id)
    assert response.status == "error" and "Refused" in response.body["payload"]["error"]["message"]
    assert not AgentRun.objects.exists()


def test_an_edited_message_no_longer_verifies(registry, director):
    request = bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})
    body = dict(request.body, recipientId="dispatch-agent")  # redirected in the database
    A2AMessage.objects.filter(pk=request.pk).update(body=body, recipient_id="dispatch-agent")
    deliver(str(request.message_id), request.signature)
    assert refusal().details["reason"] == "its signature does not verify"
    assert not AgentRun.objects.exists()


@pytest.mark.parametrize(
    ("sender", "recipient", "says"),
    [
        ("partner-bot", "info-gathering-agent", "'partner-bot' is not a registered internal agent"),
        ("ghost", "info-gathering-agent", "'ghost' is not a registered internal agent"),
        ("director", "nobody", "the recipient 'nobody' is not an agent of this host"),
        ("director", "partner-bot", "the recipient 'partner-bot' is not an agent of this host"),
    ],
)
def test_senders_and_recipients_must_be_internal_agents(
    registry, director, sender, recipient, says
):
    request = bus.post(messages.task_request(sender, recipient, {}))
    deliver(str(request.message_id), request.signature)
    assert says in refusal().details["reason"]
    assert A2AMessage.objects.get(reply_to=request.message_id).status == "error"
    assert not AgentRun.objects.exists()


def test_a_redelivered_message_does_not_start_a_second_run(registry, director, script):
    registry["planning"].model = script({"planning-agent": [{"text": "done"}]})
    registry["planning"].save()
    request = bus.send_task("director", "planning-agent", {})
    deliver(str(request.message_id), request.signature)
    deliver(str(request.message_id), request.signature)
    assert AgentRun.objects.count() == 1
    assert A2AMessage.objects.filter(reply_to=request.message_id).count() == 1


@pytest.mark.django_db(transaction=True)
def test_send_task_command_prints_the_response(registry, director, script, settings):
    settings.EMBEDDED = True  # the command then runs the task in its own process
    registry["planning"].model = script({"planning-agent": [{"json": {"plan": "dessert"}}]})
    registry["planning"].save()
    out = StringIO()
    call_command(
        "send_task",
        "--from",
        "director",
        "--to",
        "planning-agent",
        "--params",
        '{"x": 1}',
        stdout=out,
        stderr=StringIO(),
    )
    assert '"status": "success"' in out.getvalue() and '"plan": "dessert"' in out.getvalue()
    with pytest.raises(CommandError, match="--params is not JSON"):
        call_command("send_task", "--from", "director", "--to", "planning-agent", "--params", "{x")


@pytest.mark.django_db(transaction=True)
def test_run_director_command_says_what_happened(director, script, settings):
    settings.EMBEDDED = True
    director.model = script({"director": [{"text": "no idea"}]})
    director.save()
    out = StringIO()
    call_command("run_director", "director", stdout=out)
    assert out.getvalue().startswith("director: skipped: unparseable LLM output")
    with pytest.raises(CommandError, match="No Director with agent_id 'planning-agent'"):
        call_command("run_director", "planning-agent")
