"""Issue 18's race: an approval that lands while the worker that left the run waiting still
holds its lease (after the call is held, before the lease is released). The continuation sets
the run running but cannot claim it; the run must still continue, at once, not stall.

The window is hit on purpose, not by chance: the approval is given from inside the worker's
`AgentRun.release`, before the lease is let go (the continuations run eagerly, at the
approval's commit, so they meet the held lease)."""

from dataclasses import replace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from a2a import bus
from a2a.models import A2AMessage
from agents import ending, runner
from agents.models import AgentRun
from held.kinds import tool_call
from held.models import Asker, Ceremony
from mcplet_host.celery import app
from pools.models import Mcplet
from tests.mcplet_host.test_gateway import ASSERTION

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

EMAIL = {"to": ["sato@example.jp"], "body": "Free dessert tomorrow"}


def approve_inside_the_lease(monkeypatch, admin_user, seen):
    """Every release of a run waiting on a pending call first approves that call."""
    release = AgentRun.release

    def approving_release(run, owner):
        ceremony = Ceremony.objects.filter(pk=run.waiting_for_id).first()
        if ceremony is not None and ceremony.status == Ceremony.Status.PENDING:
            held = AgentRun.objects.get(pk=run.pk)
            seen.append((held.status, held.lease_owner == owner))
            assert ceremony.approve(admin_user, assertion=ASSERTION)
        release(run, owner)

    monkeypatch.setattr(AgentRun, "release", approving_release)


def test_an_approval_landing_inside_the_lease_window_continues_the_run(
    registry, director, script, calls, admin_user, monkeypatch
):
    dispatch = registry["dispatch"]
    dispatch.model = script(
        {
            "dispatch-agent": [
                {
                    "json": {
                        "summary": "two e-mails",
                        "actions": [
                            {"tool": "send_email", "arguments": EMAIL},
                            {"tool": "send_email", "arguments": {**EMAIL, "body": "and coffee"}},
                        ],
                    }
                }
            ]
        }
    )
    dispatch.save()
    seen = []
    approve_inside_the_lease(monkeypatch, admin_user, seen)

    request = bus.send_task("director", "dispatch-agent", {"store": "shinjuku"})

    # Both approvals landed while the worker held the lease of the waiting run.
    assert seen == [(AgentRun.Status.AWAITING_APPROVAL, True)] * 2
    run = AgentRun.objects.get(request=request)
    assert run.status == AgentRun.Status.SUCCESS, run.status
    assert run.result["dispatched"] == {"succeeded": 2, "failed": 0}
    assert [c["arguments"]["body"] for c in calls("send_email")] == [
        "Free dessert tomorrow",
        "and coffee",
    ]
    assert run.lease_owner == "" and run.lease_until is None
    responses = A2AMessage.objects.filter(reply_to=request.message_id)
    assert [r.status for r in responses] == ["success"]


def test_a_held_tool_call_approved_inside_the_lease_window_continues(
    registry, director, script, calls, admin_user, monkeypatch
):
    planning = registry["planning"]
    planning.model = script(
        {
            "planning-agent": [
                {"tool_calls": [{"name": "approve_plan", "arguments": {}}]},
                {"expect": {"tool_results_contain": ["approve_plan"]}, "json": {"plan": "ok"}},
            ]
        }
    )
    planning.save()
    seen = []
    approve_inside_the_lease(monkeypatch, admin_user, seen)

    request = bus.send_task("director", "planning-agent", {"store": "shinjuku"})

    assert seen == [(AgentRun.Status.AWAITING_APPROVAL, True)]
    run = AgentRun.objects.get(request=request)
    assert run.status == AgentRun.Status.SUCCESS and run.result == {"plan": "ok"}
    assert len(calls("approve_plan")) == 1
    assert A2AMessage.objects.filter(reply_to=request.message_id).count() == 1


def test_a_run_that_breaks_after_holding_a_call_rejects_it(
    registry, director, script, calls, admin_user
):
    """A run that ends while a call it held is still pending (here: its LLM turn breaks after
    the hold, on a later advance) leaves nothing to approve: the call is rejected, never run."""
    planning = registry["planning"]
    planning.model = script({"planning-agent": [{"tool_calls": [{"name": "approve_plan"}]}]})
    planning.save()
    request = bus.send_task("director", "planning-agent", {"store": "shinjuku"})
    run = AgentRun.objects.get(request=request)
    held = run.waiting_for
    assert held.status == Ceremony.Status.PENDING

    assert ending.finish(run, AgentRun.Status.ERROR, error={"message": "broke"})

    held.refresh_from_db()
    assert held.status == Ceremony.Status.REJECTED
    assert not held.approve(admin_user)
    assert calls("approve_plan") == []
    assert [m.status for m in A2AMessage.objects.filter(reply_to=request.message_id)] == ["error"]


def test_the_run_says_it_may_have_held_before_the_gateway_holds(
    registry, director, script, calls, monkeypatch
):
    """Committed before the hold: a worker that dies right after the gateway held the call
    (before the run records its wait) leaves a run whose end still looks for that call."""
    planning = registry["planning"]
    planning.model = script({"planning-agent": [{"tool_calls": [{"name": "approve_plan"}]}]})
    planning.save()
    at_the_hold = []
    hold = tool_call.hold

    def holding(mcplet, arguments, asker, *args, **kwargs):
        run_id = asker.continuation_ref.partition(":")[0]
        at_the_hold.append(AgentRun.objects.get(pk=run_id).may_have_held)
        return hold(mcplet, arguments, asker, *args, **kwargs)

    monkeypatch.setattr(tool_call, "hold", holding)

    bus.send_task("director", "planning-agent", {"store": "shinjuku"})

    assert at_the_hold == [True]
    assert calls("approve_plan") == []


def test_a_run_that_held_nothing_ends_without_looking(registry, director):
    """An A2A delivery whose run held nothing (here: it ends at once) makes no query for calls
    left pending; an operator's cancel looks whatever its copy of the run says, since a worker
    may be holding a call right then."""
    app.conf.task_always_eager = False  # the worker is this test
    request = bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})
    run = runner.start(request, registry["info"])
    with CaptureQueriesContext(connection) as statements:
        assert ending.finish(run, AgentRun.Status.SUCCESS, result={"analysis": "ok"})
    assert not [q for q in statements.captured_queries if "passkey_ceremony" in q["sql"]]

    request = bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})
    run = runner.start(request, registry["info"])
    operators_copy = AgentRun.objects.get(pk=run.pk)
    run.may_hold()  # the worker holds a call meanwhile, after the operator read the run
    asker = Asker("info-gathering-agent", continuation=runner.RESUME_TASK)
    held = tool_call.hold(
        Mcplet.objects.get(name="approve_plan"),
        {},
        replace(asker, continuation_ref=f"{run.pk}:0"),
    )
    assert not operators_copy.may_have_held

    assert ending.cancel(operators_copy)

    held.refresh_from_db()
    assert held.status == Ceremony.Status.REJECTED


@pytest.mark.parametrize("held", ["action", "result"])
def test_a_run_that_breaks_after_holding_its_action_or_result_rejects_it(
    registry, director, script, calls, admin_user, held
):
    """As for a tool call: a proposed action, or the result itself, held for a person and left
    pending when the run ends, is rejected, never run."""
    dispatch = registry["dispatch"]
    answer = {"summary": "one e-mail", "actions": [{"tool": "send_email", "arguments": EMAIL}]}
    dispatch.model = script({"dispatch-agent": [{"json": answer}]})
    dispatch.result_needs_approval = held == "result"
    dispatch.save()
    request = bus.send_task("director", "dispatch-agent", {"store": "shinjuku"})
    run = AgentRun.objects.get(request=request)
    ceremony = run.waiting_for
    assert ceremony.status == Ceremony.Status.PENDING
    assert ceremony.continuation_ref == f"{run.pk}:{'action-0' if held == 'action' else 'result'}"

    assert ending.finish(run, AgentRun.Status.ERROR, error={"message": "broke"})

    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.REJECTED
    assert not ceremony.approve(admin_user, assertion=ASSERTION)
    assert calls("send_email") == []
