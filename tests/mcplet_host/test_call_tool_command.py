import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from held.models import Ceremony
from mcplet_host.models import AuditEvent

pytestmark = pytest.mark.django_db


def run(*args):
    out = StringIO()
    call_command("call_tool", *args, stdout=out)
    return out.getvalue()


def test_prints_the_envelope(registry):
    out = run(
        "--agent", "planning-agent", "--tool", "query_crm", "--args", '{"filter": "rain"}', "--json"
    )
    envelope = json.loads(out)
    assert envelope["result"]["arguments"] == {"filter": "rain"}
    assert envelope["_meta"]["toolId"] == "query_crm"


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
    assert f"https://host.example/passkey/ceremonies/{ceremony.token}/" in out
    assert "waits for approval" in out and calls() == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--agent", "nobody", "--tool", "query_crm"], "No agent with agent_id 'nobody'."),
        (
            ["--agent", "planning-agent", "--tool", "query_crm", "--args", "{oops"],
            "--args is not JSON",
        ),
    ],
)
def test_bad_input(registry, args, says):
    with pytest.raises(CommandError, match=says):
        run(*args)
