"""An LLM naming app-only tools (issue 14, reproduction 2): in the actions it proposes, nothing
runs until a person approves that very call with its exact arguments — whatever its type, and
not before the result's own approval when the agent's result needs one; in its tool calls
(the `model` surface), an app-only tool is never offered and never runs, however it is spelt.

Each attempt is one test; the MCP server's own call log shows nothing ran, and an audit event
says why (the approval asked for, with who proposed it, or the gateway's refusal)."""

import pytest

from a2a import bus
from agents.models import AgentRun
from held.models import Ceremony
from mcplet_host import gateway
from mcplet_host.authority import Authority
from mcplet_host.models import AuditEvent
from tests.mcplet_host.test_gateway import ASSERTION
from tests.security import workflow
from tests.security.workflow import (
    APP_ONLY,
    PARTNER,
    blocked,
    partner_task,
    run_of,
    spellings,
)

# One MCP server for the module; tests/conftest.py's registry and call log point at it.
calls, committed, dispatch, reference_server, shared = (
    workflow.calls,
    workflow.committed,
    workflow.dispatch,
    workflow.reference_server,
    workflow.shared,
)

ATTACK_CLASS = "LLM naming app-only tools"

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("eager")]

ARGUMENTS = {
    "send_email": {"to": ["sato@example.jp"], "body": "Free dessert"},
    "app_only_lookup": {},
    "export_bookings": {"since": "2026-01-01", "format": "csv"},
    "prepare_coupon": {"discount": 100, "nested": {"codes": ["A", "B"]}},
    "post_sns": {"text": "Free dessert today!"},
}
WHO = {"the Director's task": None, "a partner's task": PARTNER}


def propose(dispatch, script, committed, tool, who):
    dispatch.model = script(
        {"dispatch-agent": [{"json": {"summary": "one call", "actions": [_action(tool)]}}]}
    )
    dispatch.save()
    with committed():
        if who is None:
            bus.send_task("director", "dispatch-agent", {"store": "shinjuku"})
        else:
            partner_task(recipient="dispatch-agent")
    return run_of("dispatch-agent")


def _action(tool):
    return {"tool": tool, "arguments": ARGUMENTS[tool], "why": "the plan says so"}


# --- in actions: held for a person ----------------------------------------------------------------

PROPOSALS = [(tool, who) for tool in APP_ONLY for who in WHO]


@pytest.mark.parametrize(("tool", "who"), PROPOSALS, ids=[f"{t}-{w}" for t, w in PROPOSALS])
def test_a_proposed_app_call_waits_for_a_person_and_runs_nothing_when_rejected(
    dispatch, script, calls, committed, admin_user, tool, who
):
    run = propose(dispatch, script, committed, tool, WHO[who])

    assert run.status == AgentRun.Status.AWAITING_APPROVAL and calls() == []
    ceremony = run.waiting_for
    assert (ceremony.tool_name, ceremony.surface, ceremony.arguments) == (
        tool,
        "app",
        ARGUMENTS[tool],
    )
    assert ceremony.proposed_by_model
    chain = f"on behalf of {PARTNER}" if WHO[who] else "via director"
    assert ceremony.asked_by == f"dispatch-agent's model, {chain}"
    requested = AuditEvent.objects.get(event_type="mcplet.approval.requested", target_tool=tool)
    assert requested.details["proposed_by"] == "dispatch-agent's model"
    assert requested.details["arguments"] == ARGUMENTS[tool]
    assert requested.details.get("partner") == WHO[who]

    with committed():
        ceremony.decline(Ceremony.Status.REJECTED, admin_user)

    run.refresh_from_db()
    assert run.status == AgentRun.Status.CANCELLED and calls() == []
    denied = AuditEvent.objects.get(event_type="PERMISSION_DENIED", target_tool=tool)
    assert denied.details["status"] == "rejected" and denied.details.get("partner") == WHO[who]


@pytest.mark.parametrize("tool", APP_ONLY)
def test_nothing_proposed_runs_before_the_results_approval(
    dispatch, script, calls, committed, admin_user, tool
):
    dispatch.result_needs_approval = True
    dispatch.save()
    run = propose(dispatch, script, committed, tool, PARTNER)

    assert run.status == AgentRun.Status.AWAITING_APPROVAL and calls() == []
    (ceremony,) = Ceremony.objects.all()  # the result's approval only: no call was even held
    assert ceremony.kind == Ceremony.Kind.RESULT and ceremony.arguments["actions"] == [
        _action(tool)
    ]
    assert ceremony.authority.partner == PARTNER
    requested = AuditEvent.objects.get(event_type="mcplet.approval.requested")
    assert (requested.details["kind"], requested.details["partner"]) == ("result", PARTNER)

    with committed():
        ceremony.decline(Ceremony.Status.REJECTED, admin_user)
    run.refresh_from_db()
    assert run.status == AgentRun.Status.CANCELLED and calls() == []
    assert Ceremony.objects.count() == 1


def test_reproduction_2_an_approved_proposal_runs_once_exactly_as_approved(
    dispatch, script, calls, committed, admin_user
):
    """`{"actions": [{"tool": "app_only_lookup", "arguments": {}}]}` runs nothing until a person
    approves; then exactly that call runs, once; a strict action still gets its own assertion."""
    dispatch.model = script(
        {
            "dispatch-agent": [
                {"json": {"actions": [_action("app_only_lookup"), _action("send_email")]}}
            ]
        }
    )
    dispatch.save()
    with committed():
        partner_task(recipient="dispatch-agent")
    run = run_of("dispatch-agent")
    lookup = run.waiting_for
    assert (lookup.tool_name, lookup.enforcement) == ("app_only_lookup", "host-only")
    assert calls() == []

    with committed():
        lookup.approve(admin_user)
    assert [c["name"] for c in calls()] == ["app_only_lookup"]
    run.refresh_from_db()
    email = run.waiting_for
    assert (email.tool_name, email.enforcement, email.needs_assertion) == (
        "send_email",
        "strict",
        True,
    )
    with committed():
        email.approve(admin_user, assertion=ASSERTION)

    run.refresh_from_db()
    assert run.status == AgentRun.Status.SUCCESS
    assert run.result["dispatched"] == {"succeeded": 2, "failed": 0}
    first, second = calls()
    assert (first["arguments"], first["meta"]["idempotencyKey"]) == ({}, lookup.token)
    assert "mcplet_auth" not in first["meta"]
    assert second["arguments"] == ARGUMENTS["send_email"]
    assert second["meta"]["mcplet_auth"] == ASSERTION
    executed = AuditEvent.objects.filter(event_type="TOOL_EXECUTED")
    assert {e.details["partner"] for e in executed} == {PARTNER}


def test_host_code_on_the_app_surface_is_not_held(registry, calls):
    """An operator's call (manage.py call_tool) is not an LLM's proposal: it runs as before."""
    outcome = gateway.call_tool(registry["planning"], "app_only_lookup", {}, "app")
    assert outcome.status == "executed" and len(calls("app_only_lookup")) == 1


# --- in tool calls: the model surface never reaches them ----------------------------------------

NAMINGS = [(tool, how) for tool in APP_ONLY for how in spellings(tool)]


@pytest.mark.parametrize(("tool", "how"), NAMINGS, ids=[f"{t}-{h}" for t, h in NAMINGS])
def test_an_app_only_tool_named_in_tool_calls_never_runs(
    dispatch, script, calls, committed, tool, how
):
    name = spellings(tool)[how]
    assert tool not in {t.name for t in gateway.tools_for(dispatch, Authority.of_partner(PARTNER))}
    dispatch.model = script(
        {
            "dispatch-agent": [
                {"tool_calls": [{"name": name, "arguments": ARGUMENTS[tool]}]},
                {"expect": {"tool_errors": True}, "text": "refused"},
            ]
        }
    )
    dispatch.save()
    with committed():
        partner_task(recipient="dispatch-agent")

    assert calls() == [] and not Ceremony.objects.exists()
    event = blocked(name)
    assert event.details["rule"] == ("surface" if how == "exact" else "routable")
    assert event.details["partner"] == PARTNER and event.actor_id == "dispatch-agent"
    assert run_of("dispatch-agent").status == AgentRun.Status.SUCCESS  # the refusal fed back
