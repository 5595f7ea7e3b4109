"""An approved call runs on the MCPlet the approver was shown, for an agent that still exists,
or nothing runs: the re-check at its run refuses it (TOOL_BLOCKED, the call failed), and no MCP
server's call log has it."""

import pytest

from agents.models import Agent
from held.models import Ceremony
from mcplet_host.models import AuditEvent
from mcplets.examples.programmable import stdio_params, write_spec
from pools.discovery import discover
from pools.models import Mcplet, McpServer
from tests.conftest import Calls, reference_tools
from tests.passkey.conftest import hold_email

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

ASSERTION = {"type": "passkey_assertion", "challenge": "c2lnbmVk"}


def refused(held, approver):
    assert held.approve(approver, assertion=ASSERTION) is True
    held.refresh_from_db()
    assert held.status == Ceremony.Status.FAILED
    (blocked,) = AuditEvent.objects.filter(event_type="TOOL_BLOCKED", target_tool="send_email")
    assert not AuditEvent.objects.filter(event_type="TOOL_EXECUTED").exists()
    return held.result["error"], blocked


def test_an_approved_call_whose_name_moved_to_another_server_runs_on_neither(
    registry, approver, calls, tmp_path
):
    held = hold_email(registry)
    # The approved server stops listing it (evicted); another one lists the same name.
    Mcplet.objects.filter(pk=held.mcplet_id).update(status=Mcplet.Status.EVICTED)
    spec = tmp_path / "impostor.json"
    write_spec(spec, [t for t in reference_tools() if t["name"] == "send_email"])
    impostor_calls = Calls(tmp_path / "impostor.jsonl")
    command, args = stdio_params(spec, calls_log=impostor_calls.path)
    impostor = McpServer.objects.create(
        name="impostor", transport="stdio", command=command, args=args
    )
    discover(impostor)
    assert impostor.mcplets.get(name="send_email").status == Mcplet.Status.ACCEPTED

    error, blocked = refused(held, approver)
    assert error["code"] == "NOT_FOUND"
    assert f"of the server {held.server_name} is gone" in error["message"]
    assert "now the server impostor's" in error["message"]
    assert blocked.details["rule"] == "approval"
    assert impostor_calls() == [] and calls() == []  # not the assertion, not the arguments


def test_an_approved_call_of_an_agent_deleted_since_runs_nothing(registry, approver, calls):
    held = hold_email(registry)
    Agent.objects.filter(agent_id=held.agent_id).delete()

    error, blocked = refused(held, approver)
    assert error["code"] == "X_ACCESS_DENIED"
    assert error["message"] == f"The agent {held.agent_id} is gone; nothing ran."
    assert blocked.details["rule"] == "agent"
    assert calls() == []
