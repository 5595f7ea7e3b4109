"""The local bus refuses what the host did not send: forged, tampered, foreign senders."""

import time
import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from a2a import bus, messages
from a2a.models import A2AMessage
from agents.models import AgentRun
from agents.tasks import deliver
from mcplet_host.authority import HOST
from mcplet_host.models import AuditEvent

pytestmark = pytest.mark.django_db


def refusal():
    return AuditEvent.objects.get(event_type="a2a.message.refused")


def test_a_message_forged_into_the_broker_is_refused(registry):
    deliver(str(uuid.uuid4()), "0" * 64)
    assert "no such message was sent" in refusal().details["reason"]
    assert not AgentRun.objects.exists()


@pytest.mark.parametrize("signature", ["", "0" * 64, None, "not hex"])
def test_a_forged_delivery_is_dropped_and_the_genuine_one_still_runs(
    registry, director, script, signature
):
    """A delivery the host did not sign, naming a genuine request, must not answer that request
    (issue 14, reproduction 6): it is audited and dropped, and the genuine delivery runs."""
    registry["info"].model = script({"info-gathering-agent": [{"text": "done"}]})
    registry["info"].save()
    request = bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})
    deliver(str(request.message_id), signature)
    assert refusal().details["reason"] == bus.FORGED
    assert refusal().trace_id == str(request.context_id)
    assert not A2AMessage.objects.filter(reply_to=request.message_id).exists()
    assert not AgentRun.objects.exists()
    request.refresh_from_db()
    assert request.state == A2AMessage.State.QUEUED

    deliver(str(request.message_id), request.signature)
    assert AgentRun.objects.get().status == AgentRun.Status.SUCCESS
    assert A2AMessage.objects.get(reply_to=request.message_id).status == "success"


def test_an_edited_message_no_longer_verifies(registry, director):
    request = bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})
    body = dict(request.body, recipientId="dispatch-agent")  # redirected in the database
    A2AMessage.objects.filter(pk=request.pk).update(body=body, recipient_id="dispatch-agent")
    deliver(str(request.message_id), request.signature)
    assert refusal().details["reason"] == "its signature does not verify"
    # The stored request itself was edited: no delivery will ever verify, so it is answered.
    assert A2AMessage.objects.get(reply_to=request.message_id).status == "error"
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
    request = bus.post(messages.task_request(sender, recipient, {}), HOST.then(sender))
    deliver(str(request.message_id), request.signature)
    assert says in refusal().details["reason"]
    assert A2AMessage.objects.get(reply_to=request.message_id).status == "error"
    assert not AgentRun.objects.exists()


def test_a_delivery_checks_with_the_registry_read_with_its_request(registry, director, script):
    """The registry's token comes with the request's row, in one statement: a recipient
    disabled behind the ORM's back (raw SQL) after a delivery warmed the registry is refused
    by the very next one."""
    registry["planning"].model = script({"planning-agent": [{"text": "done"}]})
    registry["planning"].save()
    first = bus.send_task("director", "planning-agent", {})
    with CaptureQueriesContext(connection) as read:
        deliver(str(first.message_id), first.signature)
    assert AgentRun.objects.get().status == AgentRun.Status.SUCCESS
    reads = [q["sql"] for q in read.captured_queries if "mcplet_host_registryversion" in q["sql"]]
    assert len(reads) == 1 and '"a2a_a2amessage"."signature"' in reads[0]

    with connection.cursor() as cursor:
        cursor.execute("UPDATE agents_agent SET enabled = false WHERE agent_id = 'planning-agent'")
    second = bus.send_task("director", "planning-agent", {})
    deliver(str(second.message_id), second.signature)
    assert refusal().details["reason"] == "the recipient 'planning-agent' is disabled"
    assert AgentRun.objects.count() == 1


def test_parameters_that_break_the_recipients_input_schema_are_answered_with_an_error(
    registry, director
):
    """§18.4 on the local bus: the recipient's inputSchema is checked before a run starts."""
    registry["planning"].input_schema = {
        "type": "object",
        "properties": {"plan": {"type": "string"}},
        "required": ["plan"],
    }
    registry["planning"].save()
    request = bus.send_task("director", "planning-agent", {"plan": ["not", "text"]})
    deliver(str(request.message_id), request.signature)
    assert "payload.parameters.plan: ['not', 'text'] is not of type" in refusal().details["reason"]
    error = A2AMessage.objects.get(reply_to=request.message_id).body["payload"]["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert "inputSchema of planning-agent" in error["message"]
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
def test_send_task_says_at_once_where_a_waiting_run_is_approved(
    registry, director, script, settings
):
    settings.EMBEDDED = True
    settings.PASSKEY_ORIGIN = "http://localhost:8123"
    settings.PASSKEY_OPEN_BROWSER = False
    planning = registry["planning"]
    planning.model = script({"planning-agent": [{"json": {"plan": "dessert"}}]})
    planning.result_needs_approval, planning.approval_prompt = True, "Approve the plan"
    planning.save()
    out, started = StringIO(), time.monotonic()
    call_command(  # no CommandError: the task is in good hands
        "send_task", "--from", "director", "--to", "planning-agent", "--wait", "20", stdout=out
    )
    assert time.monotonic() - started < 10  # not the whole --wait
    ceremony = AgentRun.objects.get(agent=planning).waiting_for
    assert out.getvalue() == (
        "planning-agent waits for a confirmation of planning-agent's result, before it is handed "
        "on (Approve the plan).\n"
        f"Confirm or reject it at http://localhost:8123/passkey/ceremonies/{ceremony.token}/\n"
    )


@pytest.mark.django_db(transaction=True)
def test_send_task_links_to_the_running_host(registry, director, script, settings, monkeypatch):
    """The host runs on the port its `runhost --port` said, whatever this shell's settings."""
    from passkey import links

    settings.EMBEDDED = True
    settings.PASSKEY_ORIGIN = "http://localhost:8000"
    settings.PASSKEY_OPEN_BROWSER = False
    links.publish("http://localhost:8766", "http://localhost:8766")
    monkeypatch.setattr(links, "_serving_pages", False)  # published by the host, elsewhere
    planning = registry["planning"]
    planning.model = script({"planning-agent": [{"json": {"plan": "dessert"}}]})
    planning.result_needs_approval, planning.approval_prompt = True, "Approve the plan"
    planning.save()
    out = StringIO()
    call_command("send_task", "--from", "director", "--to", "planning-agent", stdout=out)
    ceremony = AgentRun.objects.get(agent=planning).waiting_for
    assert f"at http://localhost:8766/passkey/ceremonies/{ceremony.token}/\n" in out.getvalue()
    assert "8000" not in out.getvalue()


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
