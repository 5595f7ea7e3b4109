"""A run's end in one statement on PostgreSQL (agents/ending.py): the same rows, signals and
audit chain as ending.finish's transaction, and the same answer to a race."""

import pytest
from django.db import connection
from django.db.models import signals
from django.test.utils import CaptureQueriesContext

from a2a import bus
from a2a.models import A2AMessage
from agents import ending, runner
from agents.models import AgentRun
from mcplet_host import audit
from mcplet_host.celery import app
from mcplet_host.models import AuditEvent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("eager")]


def _started(agent):
    app.conf.task_always_eager = False  # the worker is this test
    request = bus.send_task("director", agent.agent_id, {"store": "shinjuku"})
    return request, runner.start(request, agent)


@pytest.fixture
def started(registry, director):
    """A delivered request and its run, as a worker holds it before its end."""
    return _started(registry["info"])


@pytest.fixture
def hands_off(registry, director):
    """As `started`, for an agent that hands its result off to planning."""
    info = registry["info"]
    info.hands_off_to = registry["planning"]
    info.save()
    return _started(info)


def ended(run, status, **outcome):
    heard = []

    def receiver(sender, instance, created, **kwargs):
        heard.append((sender.__name__, created))

    signals.post_save.connect(receiver)
    try:
        with CaptureQueriesContext(connection) as captured:
            done = ending.finish(run, status, **outcome)
    finally:
        signals.post_save.disconnect(receiver)
    return done, [q["sql"] for q in captured.captured_queries], heard


def one_statement(queries):
    """Whether `queries` are the end's one statement (PostgreSQL) or a transaction."""
    if connection.vendor == "postgresql":
        return [q.split()[:3] for q in queries] == [["WITH", "guard", "AS"]]
    return "BEGIN" in queries[0] or "SAVEPOINT" in queries[0]


def test_a_run_ends_in_one_statement_with_its_response_mark_and_audit_event(started):
    request, run = started
    done, queries, heard = ended(run, AgentRun.Status.SUCCESS, result={"analysis": "rain"})

    assert done is True and one_statement(queries)
    read = AgentRun.objects.get(pk=run.pk)
    assert (read.status, read.result, read.lease_owner) == ("success", {"analysis": "rain"}, "")
    assert read.finished_at == run.finished_at
    response = A2AMessage.objects.get(reply_to=request.message_id)
    assert response.body["status"] == "success" and response.body["payload"]["result"] == {
        "analysis": "rain"
    }
    assert A2AMessage.objects.get(pk=request.pk).state == A2AMessage.State.ANSWERED
    assert ("AgentRun", False) in heard and ("A2AMessage", True) in heard
    event = AuditEvent.objects.get(event_type="agent.run.finished")
    assert event.details["run"] == str(run.pk) and event.details["status"] == "success"
    assert audit.verify_chain()[1] is None


def test_an_ended_run_ends_no_second_time(hands_off):
    request, run = hands_off
    late = AgentRun.objects.get(pk=run.pk)
    assert ending.finish(run, AgentRun.Status.ERROR, error={"message": "first"}) is True

    done, queries, heard = ended(late, AgentRun.Status.SUCCESS, result={"analysis": "late"})

    assert done is False and heard == []
    assert (late.status, late.result) == ("error", None)  # read again as it stands
    assert A2AMessage.objects.filter(reply_to=request.message_id).count() == 1
    assert not A2AMessage.objects.filter(type="task_request", sender_id="info-gathering-agent")
    assert AuditEvent.objects.filter(event_type="agent.run.finished").count() == 1
    assert audit.verify_chain()[1] is None


def test_a_request_refused_meanwhile_keeps_its_answer_and_the_run_still_ends(started):
    """A racing delivery refused the request (its recipient disabled) after this one started
    the run: the refusal's answer stands, and the run ends, audited, with no second answer."""
    request, run = started
    bus.refuse(request.message_id, request, "the recipient is disabled")

    done, _, heard = ended(run, AgentRun.Status.SUCCESS, result={"analysis": "rain"})

    assert done is True and ("A2AMessage", True) not in heard
    assert A2AMessage.objects.get(pk=request.pk).state == A2AMessage.State.REFUSED
    [answer] = A2AMessage.objects.filter(reply_to=request.message_id)
    assert answer.body["status"] == "error"
    assert AgentRun.objects.get(pk=run.pk).status == AgentRun.Status.SUCCESS
    assert AuditEvent.objects.filter(event_type="agent.run.finished").count() == 1
    assert audit.verify_chain()[1] is None


def test_a_run_that_hands_off_ends_in_one_statement_with_its_hand_off(hands_off):
    request, run = hands_off
    done, queries, heard = ended(run, AgentRun.Status.SUCCESS, result={"analysis": "rain"})

    assert done is True and one_statement(queries)
    hand_off = A2AMessage.objects.get(type="task_request", sender_id="info-gathering-agent")
    assert hand_off.recipient_id == "planning-agent"
    assert hand_off.state == A2AMessage.State.QUEUED  # no worker: it waits in the broker
    assert hand_off.body["payload"]["parameters"] == {"analysis": "rain"}
    assert str(hand_off.context_id) == str(request.context_id)
    assert hand_off.authority.chain == ("director", "info-gathering-agent")
    assert bus.authenticate(str(hand_off.message_id), hand_off.signature) == (hand_off, "")
    assert heard.count(("A2AMessage", True)) == 2  # the response and the hand-off
    assert A2AMessage.objects.get(pk=request.pk).state == A2AMessage.State.ANSWERED
    assert AuditEvent.objects.filter(event_type="agent.run.finished").count() == 1
    assert audit.verify_chain()[1] is None


def test_a_run_that_held_calls_decided_since_ends_in_one_statement_after_a_look(started):
    """A run that may have held a call looks for what it left pending first; none (each was
    decided), and its end is the one statement (one left pending: test_lease_window)."""
    _, run = started
    run.may_hold()
    done, queries, _ = ended(run, AgentRun.Status.SUCCESS, result={"analysis": "rain"})

    assert done is True and "passkey_ceremony" in queries[0] and one_statement(queries[1:])
    assert AgentRun.objects.get(pk=run.pk).status == AgentRun.Status.SUCCESS


def test_a_hand_offs_end_is_a_statement_psycopg_keeps_parsed(hands_off):
    """psycopg turns a statement's placeholders into PostgreSQL's once and keeps the result,
    but only for a statement of at most 50 values and 4,096 characters: a longer one is parsed
    anew at every call (0.09 ms for the hand-off's end, with its 57 values). The end sets only
    the columns a run changes."""
    from psycopg import _queries

    _, run = hands_off
    sent = []

    def record(execute, sql, params, many, context):
        sent.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        assert ending.finish(run, AgentRun.Status.SUCCESS, result={"analysis": "rain"}) is True
    for sql, params in sent:
        assert len(params or ()) <= _queries.MAX_CACHED_STATEMENT_PARAMS, sql
        assert len(sql) <= _queries.MAX_CACHED_STATEMENT_LENGTH, sql


def test_an_end_leaves_what_the_run_was_created_with(started):
    request, run = started
    created = AgentRun.objects.get(pk=run.pk)
    run.parameters, run.provenance = {"store": "elsewhere"}, {"partner": "someone-else"}

    assert ending.finish(run, AgentRun.Status.SUCCESS, result={"analysis": "rain"}) is True

    read = AgentRun.objects.get(pk=run.pk)
    assert (read.status, read.result) == ("success", {"analysis": "rain"})
    assert (read.parameters, read.provenance) == (created.parameters, created.provenance)
