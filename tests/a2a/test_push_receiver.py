"""The audit receiver's look-up of a trace's live webhooks (a2a.push._webhooks_of): one kept
read of the task's configs, the live ones kept, whatever else the task or the others hold; and
none at all for a partner none of whose tasks has a live webhook."""

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from a2a import push
from a2a.models import A2AMessage, PushConfig
from mcplet_host import kept

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def nothing_seen():
    push._seen.clear()
    push._partners.clear()
    yield
    push._seen.clear()
    push._partners.clear()


def task(context_id, partner="acme-travel"):
    return A2AMessage.objects.create(
        message_id=uuid.uuid4(),
        context_id=context_id,
        type=A2AMessage.Type.TASK_REQUEST,
        sender_id=partner,
        recipient_id="dispatch-agent",
        body={},
        external=True,
    )


def config(row, name, last_status):
    return PushConfig.objects.create(
        task=row, config_id=name, url="https://hooks.example/a2a", last_status=last_status
    )


def test_only_the_live_webhooks_of_the_traces_task_are_found():
    context_id, other = uuid.uuid4(), uuid.uuid4()
    row = task(context_id)
    submitted = config(row, "submitted", {"state": "TASK_STATE_SUBMITTED"})
    working = config(row, "working", {"state": "TASK_STATE_WORKING", "message": {"x": 1}})
    config(row, "completed", {"state": "TASK_STATE_COMPLETED"})
    config(row, "no-state", {"status": "TASK_STATE_WORKING"})
    config(row, "not-an-object", ["TASK_STATE_WORKING"])
    config(task(other), "another-task", {"state": "TASK_STATE_WORKING"})

    push._webhooks_of("acme-travel", str(other))  # the partner's look, once a SEEN_FOR
    with CaptureQueriesContext(connection) as statements:
        found = push._webhooks_of("acme-travel", str(context_id))
    assert sorted(found) == sorted([submitted.pk, working.pk])
    assert len(statements.captured_queries) == 1
    [statement] = [s for key, s in kept._statements(connection).items() if PushConfig in key]
    assert statement is not kept.NOT_KEPT  # compiled once, not built anew by the ORM each time
    assert push._webhooks_of("acme-travel", str(uuid.uuid4())) == ()
    assert push._webhooks_of("acme-travel", "not a uuid \x00") == ()


def test_a_trace_is_read_again_once_its_moment_is_over():
    trace = str(uuid.uuid4())
    row = task(trace)
    config(task(uuid.uuid4()), "another-task", {"state": "TASK_STATE_WORKING"})
    assert push._webhooks_of("acme-travel", trace) == ()
    live = config(row, "late", {"state": "TASK_STATE_WORKING"})
    assert push._webhooks_of("acme-travel", trace) == ()  # within SEEN_FOR: as seen
    push._seen[trace] = (0, ())  # SEEN_FOR went by
    assert push._webhooks_of("acme-travel", trace) == (live.pk,)


def test_a_partner_with_no_live_webhook_costs_one_look_a_moment_not_one_a_trace():
    finished = config(task(uuid.uuid4()), "done", {"state": "TASK_STATE_COMPLETED"})
    config(task(uuid.uuid4(), partner="other-partner"), "theirs", {"state": "TASK_STATE_WORKING"})
    traces = [str(uuid.uuid4()) for _ in range(5)]
    for trace in traces:
        task(trace)
    with CaptureQueriesContext(connection) as statements:
        assert [push._webhooks_of("acme-travel", trace) for trace in traces] == [()] * 5
    assert len(statements.captured_queries) == 1  # does any of its tasks have a live one?
    assert "sender_id" in statements.captured_queries[0]["sql"]

    # A webhook that goes live is found once the partner's moment is over.
    PushConfig.objects.filter(pk=finished.pk).update(last_status={"state": "TASK_STATE_WORKING"})
    assert push._webhooks_of("acme-travel", str(finished.task.context_id)) == ()
    push._partners["acme-travel"] = (0, False)  # SEEN_FOR went by
    assert push._webhooks_of("acme-travel", str(finished.task.context_id)) == (finished.pk,)


def test_a_webhook_registered_here_is_seen_at_once(monkeypatch, django_capture_on_commit_callbacks):
    """`register` forgets what this process saw of the partner and the trace: the task's next
    change is pushed without waiting for SEEN_FOR."""
    from agents.models import Agent

    partner = Agent.objects.create(agent_id="acme-travel", display_name="Acme", kind="external")
    row = task(uuid.uuid4())
    assert push._webhooks_of("acme-travel", str(row.context_id)) == ()
    queued = []
    monkeypatch.setattr(push, "enqueue", lambda name, args: queued.append((name, args)))
    with django_capture_on_commit_callbacks(execute=True):
        hook = {"id": "hook", "url": "https://hooks.example/a2a"}
        push.register(partner, row, hook, baseline={"state": "TASK_STATE_SUBMITTED"})
    [live] = PushConfig.objects.filter(task=row)
    assert queued == [(push.PUSH_TASK, [live.pk])]
    assert push._webhooks_of("acme-travel", str(row.context_id)) == (live.pk,)
