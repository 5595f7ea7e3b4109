"""The built-in LLM agent: tool loop, refusals fed back, output schema, action dispatch,
result approval and hand-off — on the scripted model, through the real gateway and bus."""

import json
import threading

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from a2a import bus
from a2a.models import A2AMessage
from agents import ending, runner
from agents.models import AgentRun
from held.models import Ceremony
from mcplet_host.celery import app
from mcplet_host.models import AuditEvent
from tests.mcplet_host.test_gateway import ASSERTION

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]


def send(recipient, parameters=None, sender="director"):
    request = bus.send_task(sender, recipient, parameters or {"store": "shinjuku"})
    return request, AgentRun.objects.filter(request=request).first()


def response_to(request):
    return A2AMessage.objects.get(reply_to=request.message_id).body


def test_the_tool_loop(registry, director, script, calls):
    info = registry["info"]
    info.model = script(
        {
            "info-gathering-agent": [
                {
                    "tool_calls": [
                        {"name": "query_crm", "arguments": {"filter": "rain"}},
                        {
                            "name": "fetch_web_content",
                            "arguments": {"url": "https://w.example/tomorrow"},
                        },
                    ]
                },
                {
                    "expect": {"tool_results_contain": ["query_crm", "fetch_web_content"]},
                    "json": {"analysis": "rain tomorrow", "atRisk": 3},
                },
            ]
        }
    )
    info.save()

    request, run = send("info-gathering-agent")

    assert run.status == AgentRun.Status.SUCCESS and run.steps == 2
    assert run.result == {"analysis": "rain tomorrow", "atRisk": 3}
    assert run.prompt_tokens > 0 and run.completion_tokens > 0
    tool_messages = [m for m in run.transcript if m["role"] == "tool"]
    assert [json.loads(m["content"])["_meta"]["toolId"] for m in tool_messages] == [
        "query_crm",
        "fetch_web_content",
    ]
    assert [c["name"] for c in calls()] == ["query_crm", "fetch_web_content"]
    response = response_to(request)
    assert response["status"] == "success" and response["payload"]["result"]["atRisk"] == 3
    assert response["contextId"] == request.body["contextId"]
    assert set(
        AuditEvent.objects.filter(event_type="TOOL_EXECUTED").values_list("trace_id", flat=True)
    ) == {str(request.context_id)}


def test_a_hallucinated_tool_is_refused_and_fed_back(registry, director, script, calls):
    planning = registry["planning"]
    planning.model = script(
        {
            "planning-agent": [
                {"tool_calls": [{"name": "drop_database", "arguments": {}}]},
                {
                    "expect": {"tool_errors": True, "tool_results_contain": ["NOT_FOUND"]},
                    "text": "I cannot do that.",
                },
            ]
        }
    )
    planning.save()
    request, run = send("planning-agent")
    assert run.status == AgentRun.Status.SUCCESS and run.result == {"answer": "I cannot do that."}
    assert calls() == []
    assert AuditEvent.objects.get(event_type="TOOL_BLOCKED").target_tool == "drop_database"


def test_a_tool_outside_the_grants_is_refused_even_if_the_llm_names_it(
    registry, director, script, calls
):
    planning = registry["planning"]
    planning.model = script(
        {
            "planning-agent": [
                {
                    "tool_calls": [
                        {"name": "send_email", "arguments": {"to": ["a@b.jp"], "body": "x"}}
                    ]
                },
                {
                    "expect": {"tool_errors": True, "tool_results_contain": ["X_ACCESS_DENIED"]},
                    "text": "refused",
                },
            ]
        }
    )
    planning.save()
    _, run = send("planning-agent")
    assert run.status == AgentRun.Status.SUCCESS and calls() == [] and not Ceremony.objects.exists()


def test_an_answer_breaking_the_output_schema_is_retried_once(registry, director, script):
    planning = registry["planning"]
    planning.output_schema = {"type": "object", "required": ["plan"]}
    planning.model = script(
        {
            "planning-agent": [
                {"text": "Here is my plan: free desserts"},
                {
                    "expect": {"user_contains": ["does not match the output schema"]},
                    "json": {"plan": "free desserts"},
                },
            ]
        }
    )
    planning.save()
    _, run = send("planning-agent")
    assert run.status == AgentRun.Status.SUCCESS and run.output_retries == 1
    assert run.result == {"plan": "free desserts"}


def test_an_answer_that_breaks_the_schema_twice_fails(registry, director, script):
    planning = registry["planning"]
    planning.output_schema = {"type": "object", "required": ["plan"]}
    planning.model = script({"planning-agent": [{"json": {"nope": 1}}, {"json": {"still": "no"}}]})
    planning.save()
    request, run = send("planning-agent")
    assert run.status == AgentRun.Status.ERROR and run.error["code"] == "VALIDATION_ERROR"
    assert response_to(request)["payload"]["error"]["message"].startswith(
        "The answer does not match"
    )


def test_the_step_limit_ends_a_runaway_loop(registry, director, script):
    planning = registry["planning"]
    planning.max_steps = 2
    loop = {"tool_calls": [{"name": "query_crm", "arguments": {"filter": "x"}}]}
    planning.model = script({"planning-agent": [loop, loop, loop]})
    planning.save()
    request, run = send("planning-agent")
    assert run.status == AgentRun.Status.PARTIAL and run.error["code"] == "X_STEP_LIMIT"
    assert response_to(request)["status"] == "partial"


def test_a_conversation_that_leaves_its_script_fails_loudly(registry, director, script):
    planning = registry["planning"]
    planning.model = script(
        {"planning-agent": [{"tool_calls": [{"name": "query_crm", "arguments": {"filter": "x"}}]}]}
    )
    planning.save()
    _, run = send("planning-agent")
    assert run.status == AgentRun.Status.ERROR and "left its script" in run.error["message"]


def test_proposed_actions_run_only_through_an_approval(
    registry, director, script, calls, admin_user
):
    dispatch = registry["dispatch"]
    email = {"to": ["sato@example.jp"], "body": "Free dessert tomorrow"}
    dispatch.model = script(
        {
            "dispatch-agent": [
                {
                    "json": {
                        "summary": "one e-mail",
                        "actions": [{"tool": "send_email", "arguments": email, "why": "rain"}],
                    }
                },
            ]
        }
    )
    dispatch.save()
    request, run = send("dispatch-agent")

    assert run.status == AgentRun.Status.AWAITING_APPROVAL and calls() == []
    ceremony = run.waiting_for
    assert (ceremony.tool_name, ceremony.surface, ceremony.arguments) == (
        "send_email",
        "app",
        email,
    )
    assert not A2AMessage.objects.filter(reply_to=request.message_id).exists()

    ceremony.approve(admin_user, assertion=ASSERTION)

    run.refresh_from_db()
    assert run.status == AgentRun.Status.SUCCESS
    assert run.result["dispatched"] == {"succeeded": 1, "failed": 0}
    assert calls("send_email")[0]["meta"]["mcplet_auth"] == ASSERTION
    assert response_to(request)["status"] == "success"


def test_a_rejected_action_cancels_the_run(registry, director, script, calls, admin_user):
    dispatch = registry["dispatch"]
    dispatch.model = script(
        {
            "dispatch-agent": [
                {
                    "json": {
                        "actions": [
                            {"tool": "send_email", "arguments": {"to": ["a@b.jp"], "body": "x"}}
                        ]
                    }
                },
            ]
        }
    )
    dispatch.save()
    request, run = send("dispatch-agent")
    run.waiting_for.decline(Ceremony.Status.REJECTED, admin_user)
    run.refresh_from_db()
    assert run.status == AgentRun.Status.CANCELLED and calls() == []
    assert run.result["actions"][0]["outcome"]["error"]["code"] == "X_APPROVAL_REJECTED"
    assert response_to(request)["status"] == "cancelled"


def test_a_three_agent_hand_off_keeps_one_context(registry, director, script, admin_user):
    info, planning, dispatch = registry["info"], registry["planning"], registry["dispatch"]
    model = script(
        {
            "info-gathering-agent": [
                {"json": {"analysis": "rain", "customers": ["sato@example.jp"]}}
            ],
            "planning-agent": [
                {"expect": {"user_contains": ["sato@example.jp"]}, "json": {"plan": "dessert"}}
            ],
            "dispatch-agent": [{"expect": {"user_contains": ["dessert"]}, "json": {"sent": 0}}],
        }
    )
    for agent, after in ((info, planning), (planning, dispatch), (dispatch, None)):
        agent.model, agent.hands_off_to = model, after
        agent.save()
    planning.result_needs_approval, planning.approval_prompt = True, "Approve the campaign plan"
    planning.save()

    request, run = send("info-gathering-agent")
    plan_run = AgentRun.objects.get(agent=planning)
    assert plan_run.status == AgentRun.Status.AWAITING_APPROVAL
    ceremony = plan_run.waiting_for
    assert (ceremony.kind, ceremony.prompt_message) == ("result", "Approve the campaign plan")
    assert not AgentRun.objects.filter(agent=dispatch).exists()  # nothing handed off yet

    ceremony.approve(admin_user)

    plan_run.refresh_from_db()
    assert plan_run.status == AgentRun.Status.SUCCESS and "approvedAt" in plan_run.result
    last = AgentRun.objects.get(agent=dispatch)
    assert last.status == AgentRun.Status.SUCCESS
    context = str(request.context_id)
    assert {r.context_id for r in AgentRun.objects.all()} == {context}
    assert {str(m.context_id) for m in A2AMessage.objects.all()} == {context}
    requests = A2AMessage.objects.filter(type="task_request")
    assert [(m.sender_id, m.recipient_id) for m in requests] == [
        ("director", "info-gathering-agent"),
        ("info-gathering-agent", "planning-agent"),
        ("planning-agent", "dispatch-agent"),
    ]
    for message in requests:  # every request has exactly one response
        assert A2AMessage.objects.filter(reply_to=message.message_id).count() == 1


def test_a_rejected_result_is_not_handed_off(registry, director, script, admin_user):
    planning, dispatch = registry["planning"], registry["dispatch"]
    planning.model = script({"planning-agent": [{"json": {"plan": "x"}}]})
    planning.result_needs_approval, planning.hands_off_to = True, dispatch
    planning.save()
    request, run = send("planning-agent")
    run.waiting_for.decline(Ceremony.Status.REJECTED, admin_user)
    run.refresh_from_db()
    assert run.status == AgentRun.Status.CANCELLED
    assert not AgentRun.objects.filter(agent=dispatch).exists()
    assert response_to(request)["payload"]["error"]["code"] == "X_APPROVAL_REJECTED"


def test_a_result_nobody_approved_in_time_times_out(registry, director, script):
    planning, dispatch = registry["planning"], registry["dispatch"]
    planning.model = script({"planning-agent": [{"json": {"plan": "x"}}]})
    planning.result_needs_approval, planning.hands_off_to = True, dispatch
    planning.save()
    request, run = send("planning-agent")
    run.waiting_for.decline(Ceremony.Status.EXPIRED)
    run.refresh_from_db()
    assert run.status == AgentRun.Status.TIMEOUT  # declined by the clock: not cancelled
    assert run.get_status_display() == "Timed out"
    assert response_to(request)["payload"]["error"]["code"] == "X_APPROVAL_EXPIRED"
    assert not AgentRun.objects.filter(agent=dispatch).exists()


def test_a_resume_reads_its_run_once_as_it_claims_it(registry, director, script, admin_user):
    """The continuation of a decided result reads the run only once it holds its lease; a second
    one (a redelivery), for the run it ended, changes nothing and reads no run."""
    planning = registry["planning"]
    planning.model = script({"planning-agent": [{"json": {"plan": "x"}}]})
    planning.result_needs_approval = True
    planning.save()
    request, run = send("planning-agent")
    ceremony = run.waiting_for
    app.conf.task_always_eager = False  # the continuation is this test's to run
    ceremony.decline(Ceremony.Status.REJECTED, admin_user)

    def run_reads(statements):
        return [q for q in statements if q["sql"].startswith('SELECT "agents_agentrun"."id"')]

    with CaptureQueriesContext(connection) as first:
        runner.resume(ceremony.pk, ceremony.continuation_ref)
    run.refresh_from_db()
    assert run.status == AgentRun.Status.CANCELLED
    assert len(run_reads(first.captured_queries)) == 1
    ended = run.updated_at
    with CaptureQueriesContext(connection) as again:
        runner.resume(ceremony.pk, ceremony.continuation_ref)
    run.refresh_from_db()
    assert run_reads(again.captured_queries) == [] and run.updated_at == ended
    assert A2AMessage.objects.filter(reply_to=request.message_id).count() == 1


@pytest.fixture
def handing_off(registry, director):
    """A started run of info, which hands off to planning; the worker is the test."""
    info = registry["info"]
    info.hands_off_to = registry["planning"]
    info.save()
    app.conf.task_always_eager = False  # nothing is delivered
    request = bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})
    return request, runner.start(request, info)


def test_a_run_cancelled_while_a_worker_advances_it_ends_once(handing_off):
    """The operator's cancel lands between the worker's last LLM turn and its end: the cancel
    stands, and the worker's late success sends no second response and no hand-off."""
    request, run = handing_off
    workers_copy = AgentRun.objects.get(pk=run.pk)

    assert ending.cancel(run, "Cancelled by an operator.")
    assert not ending.finish(workers_copy, AgentRun.Status.SUCCESS, result={"analysis": "late"})

    run.refresh_from_db()
    assert run.status == AgentRun.Status.CANCELLED and run.result is None
    assert workers_copy.status == AgentRun.Status.CANCELLED
    assert response_to(request)["status"] == "cancelled"
    assert A2AMessage.objects.filter(sender_id="info-gathering-agent").count() == 1
    assert AuditEvent.objects.filter(event_type="agent.run.finished").count() == 1
    assert not ending.cancel(run)


def test_a_cancel_from_a_copy_read_before_the_run_ended_changes_nothing(handing_off):
    """The operator's page read the run while it ran, the worker ended it, then the cancel
    came: its end (in a transaction) finds the run ended, and changes nothing."""
    request, run = handing_off
    operators_copy = AgentRun.objects.get(pk=run.pk)

    assert ending.finish(run, AgentRun.Status.SUCCESS, result={"analysis": "rain"})
    assert not ending.cancel(operators_copy, "Cancelled by an operator.")

    read = AgentRun.objects.get(pk=run.pk)
    assert (read.status, read.result) == (AgentRun.Status.SUCCESS, {"analysis": "rain"})
    assert response_to(request)["status"] == "success"
    hand_offs = A2AMessage.objects.filter(type="task_request", sender_id="info-gathering-agent")
    assert hand_offs.count() == 1
    assert AuditEvent.objects.filter(event_type="agent.run.finished").count() == 1


def test_a_finish_racing_a_cancel_waits_for_it_then_changes_nothing(registry, director):
    """The two ends at once, each on its own connection: the worker's finish waits on the row
    the cancel's uncommitted end holds, and once the cancel commits it finds the run ended."""
    app.conf.task_always_eager = False
    request = bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})
    run = runner.start(request, registry["info"])
    workers_copy = AgentRun.objects.get(pk=run.pk)
    ended = {}

    def worker():
        try:
            ended["worker"] = ending.finish(
                workers_copy, AgentRun.Status.SUCCESS, result={"analysis": "late"}
            )
        finally:
            connection.close()

    thread = threading.Thread(target=worker)
    with transaction.atomic():
        assert ending.cancel(run, "Cancelled by an operator.")
        thread.start()
        thread.join(1.0)
        assert thread.is_alive()  # waiting for the cancel's transaction
    thread.join(30)

    assert ended == {"worker": False}
    assert workers_copy.status == AgentRun.Status.CANCELLED and workers_copy.result is None
    assert response_to(request)["status"] == "cancelled"
    assert A2AMessage.objects.filter(reply_to=request.message_id).count() == 1
    assert AuditEvent.objects.filter(event_type="agent.run.finished").count() == 1


def test_two_deliveries_at_once_start_one_run(registry, director):
    """The request marked delivered and its run created in one statement: a second delivery
    on its own connection waits on the request's row the first holds, then finds it marked."""
    app.conf.task_always_eager = False
    request = bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})
    copy = A2AMessage.objects.get(pk=request.pk)
    started = {}

    def second():
        try:
            started["second"] = runner.start(copy, registry["info"])
        finally:
            connection.close()

    thread = threading.Thread(target=second)
    with transaction.atomic():
        run = runner.start(request, registry["info"])
        thread.start()
        thread.join(1.0)
        assert thread.is_alive() or connection.vendor != "postgresql"  # waiting for the first
    thread.join(30)

    assert run is not None and started == {"second": None}
    assert list(AgentRun.objects.filter(request=request).values_list("pk", flat=True)) == [run.pk]
    assert A2AMessage.objects.get(pk=request.pk).state == A2AMessage.State.DELIVERED
    assert request.state == A2AMessage.State.DELIVERED and copy.state == A2AMessage.State.QUEUED
