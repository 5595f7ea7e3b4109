"""The audit receiver's look-up of a trace's live webhooks (a2a.push._webhooks_of): one kept
read of the task's configs, the live ones kept, whatever else the task or the others hold."""

import uuid
from types import SimpleNamespace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from a2a import push
from a2a.models import A2AMessage, PushConfig
from mcplet_host import kept
from mcplet_host.models import AuditEvent

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def nothing_seen():
    push._seen.clear()
    yield
    push._seen.clear()


def task(context_id):
    return A2AMessage.objects.create(
        message_id=uuid.uuid4(),
        context_id=context_id,
        type=A2AMessage.Type.TASK_REQUEST,
        sender_id="acme-travel",
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

    with CaptureQueriesContext(connection) as statements:
        found = push._webhooks_of(str(context_id))
    assert sorted(found) == sorted([submitted.pk, working.pk])
    assert len(statements.captured_queries) == 1
    [statement] = [s for key, s in kept._statements(connection).items() if PushConfig in key]
    assert statement is not kept.NOT_KEPT  # compiled once, not built anew by the ORM each time
    assert push._webhooks_of(str(uuid.uuid4())) == ()
    assert push._webhooks_of("not a uuid \x00") == ()


def test_a_trace_is_read_again_once_its_moment_is_over():
    trace = str(uuid.uuid4())
    row = task(trace)
    assert push._webhooks_of(trace) == ()
    live = config(row, "late", {"state": "TASK_STATE_WORKING"})
    assert push._webhooks_of(trace) == ()  # within SEEN_FOR: as seen
    push._seen[trace] = (0, ())  # SEEN_FOR went by
    assert push._webhooks_of(trace) == (live.pk,)


def test_a_new_trace_finds_the_webhook_registered_with_its_task(monkeypatch):
    """A webhook given with SendMessage exists before any worker takes its task up
    (bindings: one transaction): the first event of that trace in a process queues its push,
    however recently that process heard the same partner's other traces. A cache by partner
    would miss it, and a task done within its moment would be told only by the sweep."""
    queued = []
    monkeypatch.setattr(push, "enqueue", lambda name, args: queued.append((name, args)))

    def heard(trace):
        event = SimpleNamespace(trace_id=trace, details={"partner": "acme-travel"})
        push.on_audit(AuditEvent, events=[event])

    busy = str(uuid.uuid4())
    task(busy)
    heard(busy)  # the partner's other work, just heard: no webhook
    trace = str(uuid.uuid4())
    live = config(task(trace), "with-the-task", {"state": "TASK_STATE_SUBMITTED"})
    heard(trace)
    assert queued == [(push.PUSH_TASK, [live.pk])]
