import json
import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from held.kinds import tool_call
from held.models import Asker, Ceremony
from mcplet_host import handoff
from mcplet_host.models import AuditEvent
from passkey import links
from tests.processes import free_port

# With Redis the command hands its call to a worker: here, the eager one of this process.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("eager")]


def run(*args):
    out = StringIO()
    call_command("call_tool", *args, stdout=out)
    return out.getvalue()


def test_prints_the_envelope(registry, calls):
    out = run(
        "--agent", "planning-agent", "--tool", "query_crm", "--args", '{"filter": "rain"}', "--json"
    )
    envelope = json.loads(out)
    assert envelope["result"]["arguments"] == {"filter": "rain"}
    assert envelope["_meta"]["toolId"] == "query_crm"
    # A trace of its own: its audit event names the one its server was sent (MGP §6.5).
    trace = AuditEvent.objects.get(event_type="TOOL_EXECUTED").trace_id
    assert trace and uuid.UUID(trace).hex in calls("query_crm")[0]["meta"]["traceparent"]


def test_a_refusal_exits_non_zero_with_the_code(registry, calls):
    with pytest.raises(CommandError, match="X_ACCESS_DENIED: .*not granted to planning-agent"):
        run(
            "--agent",
            "planning-agent",
            "--tool",
            "fetch_web_content",
            "--args",
            '{"url": "https://x.example"}',
        )
    assert calls() == [] and AuditEvent.objects.filter(event_type="TOOL_BLOCKED").count() == 1


def test_an_action_prints_where_to_approve(registry, calls, settings):
    settings.PASSKEY_ORIGIN = "https://host.example"
    out = run(
        "--agent",
        "dispatch-agent",
        "--tool",
        "send_email",
        "--surface",
        "app",
        "--args",
        '{"to": ["a@example.jp"], "body": "hi"}',
    )
    ceremony = Ceremony.objects.get()
    assert out.splitlines() == [
        "The call is held for an approval of the action send_email, until "
        f"{ceremony.expires_at:%H:%M:%S} UTC.",
        "reference says: Approve the e-mail",
        f"Approve or reject it at https://host.example/passkey/ceremonies/{ceremony.token}/",
    ]
    assert calls() == []


SEND = ["--agent", "dispatch-agent", "--tool", "send_email", "--surface", "app"]
SEND += ["--args", '{"to": ["a@example.jp"], "body": "hi"}']


def test_its_json_says_what_the_call_waits_for(registry, calls):
    held = json.loads(run(*SEND, "--json"))
    ceremony = Ceremony.objects.get()
    assert held["kind"] == "tool_call" and held["ceremony"] == ceremony.token
    assert held["waitsFor"] == "an approval of the action send_email"
    assert held["approveAt"].endswith(f"/passkey/ceremonies/{ceremony.token}/")


def test_it_links_to_the_running_hosts_origin_whatever_its_own_settings(
    registry, calls, settings, monkeypatch
):
    """`make run PORT=8766`: the host published its origin; this shell's settings say 8000."""
    settings.PASSKEY_ORIGIN = "http://localhost:8000"
    # A host that stopped listening (the command then runs the call itself) still names where
    # the host is; a live one is tested with real processes (tests/e2e).
    links.publish("http://localhost:8766", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setattr(links, "_serving_pages", False)
    out = run(*SEND)
    ceremony = Ceremony.objects.get()
    assert f"at http://localhost:8766/passkey/ceremonies/{ceremony.token}/" in out
    assert "8000" not in out


def test_a_step_says_a_person_acts_on_the_servers_side(registry, monkeypatch):
    step = tool_call.open_call(
        Ceremony.Kind.STEP_UP,
        registry["server"].mcplets.get(name="query_crm"),
        {"filter": "rain"},
        Asker("planning-agent"),
        prompt_message="the holder must approve",
        enforcement=Ceremony.Enforcement.HOST_ONLY,
    )
    answer = {"status": "pending", "envelope": None, "ceremony": step.token}
    monkeypatch.setattr(handoff, "call", lambda *args: answer)
    out = run("--agent", "planning-agent", "--tool", "query_crm", "--args", '{"filter": "rain"}')
    assert out.splitlines() == [
        "The call is held for a step a person must take on the server reference's side before "
        f"query_crm is sent again, until {step.expires_at:%H:%M:%S} UTC. Once it is done, the "
        "host sends the same call again, once.",
        "reference says: the holder must approve",
        f"Take the step, then say so (or cancel it) at {links.ceremony_url(step)}",
    ]


def test_a_form_before_the_answer_says_the_call_is_sent_again(registry, monkeypatch):
    form = tool_call.open_call(
        Ceremony.Kind.INPUT_FORM,
        registry["server"].mcplets.get(name="query_crm"),
        {"filter": "rain"},
        Asker("planning-agent"),
        prompt_message="Which region?",
        enforcement=Ceremony.Enforcement.HOST_ONLY,
    )
    answer = {"status": "pending", "envelope": None, "ceremony": form.token}
    monkeypatch.setattr(handoff, "call", lambda *args: answer)
    out = run("--agent", "planning-agent", "--tool", "query_crm", "--args", '{"filter": "rain"}')
    assert out.splitlines() == [
        "The call is held for a form the server reference asks a person to fill in before "
        f"query_crm answers, until {form.expires_at:%H:%M:%S} UTC. Once it is done, the host "
        "sends the same call again, once.",
        "reference says: Which region?",
        f"Answer it (or decline) at {links.ceremony_url(form)}",
    ]


def test_a_host_that_fails_to_answer_is_said_so(registry, monkeypatch):
    def lost(*args):
        raise handoff.HandOffFailed("the host at http://localhost:8766 did not answer")

    monkeypatch.setattr(handoff, "call", lost)
    with pytest.raises(CommandError, match="did not answer"):
        run("--agent", "planning-agent", "--tool", "query_crm", "--args", '{"filter": "rain"}')


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--agent", "nobody", "--tool", "query_crm"], "No agent with agent_id 'nobody'."),
        (
            ["--agent", "planning-agent", "--tool", "query_crm", "--args", "{oops"],
            "--args is not JSON",
        ),
        (
            ["--agent", "planning-agent", "--tool", "query_crm", "--trace", "t" * 65],
            "--trace is at most 64 characters.",
        ),
    ],
)
def test_bad_input(registry, args, says):
    with pytest.raises(CommandError, match=says):
        run(*args)
