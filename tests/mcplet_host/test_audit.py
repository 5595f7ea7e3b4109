import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from mcplet_host import audit
from mcplet_host.models import AuditChainHead, AuditEvent

pytestmark = pytest.mark.django_db


def write_events(n):
    return [
        audit.record(
            audit.EventType.TOOL_EXECUTED,
            actor_type=audit.ActorType.AGENT,
            actor_id="info-gathering-agent",
            target_server="crm",
            target_tool="query_crm",
            trace_id="ctx-1",
            details={"duration_ms": i, "args": {"filter": "rain"}},
        )
        for i in range(n)
    ]


def test_events_form_an_intact_chain():
    events = write_events(5)
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    assert events[1].prev_hash == events[0].hash
    assert audit.verify_chain() == (5, None)
    call_command("verify_audit")


def test_event_is_in_the_mgp_shape():
    event = write_events(1)[0]
    event.refresh_from_db()
    assert event.as_mgp() == {
        "timestamp": event.as_mgp()["timestamp"],
        "trace_id": "ctx-1",
        "event_type": "TOOL_EXECUTED",
        "actor": {"type": "agent", "id": "info-gathering-agent"},
        "target": {"server_id": "crm", "tool_name": "query_crm"},
        "result": "SUCCESS",
        "details": {"duration_ms": 0, "args": {"filter": "rain"}},
    }
    assert event.as_mgp()["timestamp"].endswith("Z")


def test_an_edited_row_is_named():
    write_events(4)
    AuditEvent.objects.filter(seq=3).update(result="FAILURE")  # bypasses the model, as SQL would
    checked, broken = audit.verify_chain()
    assert (checked, broken.seq) == (2, 3)
    assert "edited" in broken.reason
    with pytest.raises(CommandError, match="event #3"):
        call_command("verify_audit")


def test_an_edited_detail_is_named():
    write_events(3)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE mcplet_host_auditevent SET details = %s WHERE seq = 2", ['{"duration_ms": 99}']
        )
    assert audit.verify_chain()[1].seq == 2


def test_a_deleted_row_is_named():
    write_events(4)
    AuditEvent.objects.filter(seq=2).delete()
    checked, broken = audit.verify_chain()
    assert broken.seq == 2 and "missing" in broken.reason


def test_a_deleted_and_renumbered_row_breaks_the_link():
    write_events(4)
    AuditEvent.objects.filter(seq=2).delete()
    AuditEvent.objects.filter(seq=3).update(seq=2)
    AuditEvent.objects.filter(seq=4).update(seq=3)
    assert audit.verify_chain()[1].seq == 2


def test_deleting_the_newest_rows_is_detected():
    write_events(4)
    AuditEvent.objects.filter(seq__gte=3).delete()
    checked, broken = audit.verify_chain()
    assert checked == 2 and "newest events were removed" in broken.reason


def test_rows_refuse_change_and_delete_through_the_model():
    event = write_events(1)[0]
    event.result = "FAILURE"
    with pytest.raises(ValueError, match="append-only"):
        event.save()
    with pytest.raises(ValueError, match="append-only"):
        event.delete()


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_extend_one_chain():
    def writer():
        try:
            write_events(10)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert audit.verify_chain() == (40, None)


@pytest.mark.django_db(transaction=True)
def test_an_event_appended_while_the_chain_is_checked_is_no_break(monkeypatch):
    """A live host writes while the chain is checked (`verify_audit`, the fault harness after
    each iteration): an event committed after the check began is not "the newest events were
    removed"; the check covers the chain up to the head it read first."""
    write_events(3)
    compute_hash = AuditEvent.compute_hash

    def append_meanwhile(event):
        if event.seq == 1:  # the check is under way: another connection appends and commits
            thread = threading.Thread(target=lambda: (write_events(1), connection.close()))
            thread.start()
            thread.join()
        return compute_hash(event)

    monkeypatch.setattr(AuditEvent, "compute_hash", append_meanwhile)
    assert audit.verify_chain() == (3, None)
    assert audit.verify_chain() == (4, None)


def test_hostile_text_is_recorded_written_out_and_the_chain_holds():
    """Recording a refusal of hostile input must never fail (issue 14): PostgreSQL refuses NUL,
    UTF-8 a lone surrogate, JSON an infinite number."""
    event = audit.record(
        audit.EventType.TOOL_BLOCKED,
        actor_id="agent\x00",
        target_tool="send\x00email\ud800",
        trace_id="ctx\x00",
        details={"path": "/a2a/tasks/\x00", "key\x00": ["\udc00", float("inf")], "ok": "café 😀"},
    )
    event.refresh_from_db()
    assert (event.actor_id, event.target_tool, event.trace_id) == (
        "agent\\x00",
        "send\\x00email\\ud800",
        "ctx\\x00",
    )
    assert event.details == {
        "path": "/a2a/tasks/\\x00",
        "key\\x00": ["\\udc00", "inf"],
        "ok": "café 😀",
    }
    assert audit.verify_chain() == (1, None)


def test_the_stored_link_is_the_models_own():
    """PostgreSQL hashes in the append statement: what it stored is what the model computes
    from the row as read back (the content digest, the place, the previous hash)."""
    first, second = write_events(2)
    for event in (first, second):
        stored = AuditEvent.objects.get(seq=event.seq)
        assert (stored.pk, stored.hash, stored.prev_hash) == (event.pk, event.hash, event.prev_hash)
        assert stored.hash == stored.compute_hash() != stored.legacy_hash()
    assert second.prev_hash == first.hash


def test_events_hashed_before_the_one_statement_append_still_verify():
    """A chain begun under the old link (one JSON of every field) goes on under the new one:
    intact, and an edit to an old row is still named."""
    old = write_events(3)
    prev = "0" * 64
    for event in old:  # rewrite the links as migration 0006's predecessors made them
        event.prev_hash = prev
        event.hash = event.legacy_hash()
        AuditEvent.objects.filter(pk=event.pk).update(prev_hash=event.prev_hash, hash=event.hash)
        prev = event.hash
    AuditChainHead.objects.filter(pk=1).update(last_hash=prev)
    write_events(2)
    assert audit.verify_chain() == (5, None)
    AuditEvent.objects.filter(seq=2).update(actor_id="someone-else")
    checked, broken = audit.verify_chain()
    assert (checked, broken.seq) == (1, 2) and "edited" in broken.reason
