"""What `verify_chain` must notice, beyond test_audit.py: a row rewritten by someone who also
recomputed its hash (issue 14: the link check could be removed unnoticed, since the tests'
edits left a row's own hash wrong as well), and the cases `make mutants` found unguarded."""

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from mcplet_host import audit
from mcplet_host.models import AuditEvent
from mcplet_host.signals import audit_recorded

pytestmark = pytest.mark.django_db


def write_events(n):
    for i in range(n):
        audit.record(
            audit.EventType.TOOL_EXECUTED,
            actor_type=audit.ActorType.AGENT,
            actor_id="dispatch-agent",
            target_tool="send_email",
            details={"n": i},
        )


def rewrite(row, **fields):
    """Change a row behind the model's back (as SQL would) and give it a matching hash."""
    event = AuditEvent.objects.get(seq=row)
    for name, value in fields.items():
        setattr(event, name, value)
    event.hash = event.compute_hash()
    AuditEvent.objects.filter(pk=event.pk).update(**fields, hash=event.hash)


def test_a_rewritten_and_rehashed_row_breaks_the_next_link():
    write_events(4)
    rewrite(2, result=audit.FAILURE, details={"n": "forged"})
    checked, broken = audit.verify_chain()
    assert (checked, broken.seq) == (2, 3)
    assert "link to the previous event does not match" in broken.reason
    with pytest.raises(CommandError, match="event #3"):
        call_command("verify_audit")


def test_a_removed_row_whose_successors_were_renumbered_and_rehashed():
    write_events(4)
    AuditEvent.objects.filter(seq=2).delete()
    for seq in (3, 4):
        rewrite(seq, seq=seq - 1)
    checked, broken = audit.verify_chain()
    assert (checked, broken.seq) == (1, 2) and "link" in broken.reason


def test_a_row_relinked_to_skip_its_predecessor():
    write_events(4)
    first = AuditEvent.objects.get(seq=1)
    rewrite(3, prev_hash=first.hash)  # row 3 now claims to follow row 1
    checked, broken = audit.verify_chain()
    assert (checked, broken.seq) == (2, 3) and "link" in broken.reason


def test_every_edit_of_a_row_is_named():
    """Whatever the new content, an edited row's hash differs: named each time (not only when
    the new hash happens to sort one way)."""
    write_events(3)
    original = AuditEvent.objects.get(seq=2)
    for n in range(16):
        AuditEvent.objects.filter(seq=2).update(details={"n": f"edit {n}"})
        assert audit.verify_chain()[1].seq == 2, n
        AuditEvent.objects.filter(seq=2).update(details=original.details)
    assert audit.verify_chain() == (3, None)


def test_the_newest_row_rewritten_and_rehashed_is_named_by_the_chain_head():
    """No later row links to the newest one: the chain head's hash is what betrays it."""
    write_events(3)
    for n in range(16):
        rewrite(3, details={"n": f"forged {n}"})
        checked, broken = audit.verify_chain()
        assert (checked, broken.seq) == (3, 3) and "newest" in broken.reason, n
    rewrite(3, details={"n": 2})
    assert audit.verify_chain() == (3, None)


def test_a_row_slipped_in_before_the_first_is_named():
    write_events(2)
    first = AuditEvent.objects.get(seq=1)
    AuditEvent.objects.bulk_create([AuditEvent(**{**_fields(first), "seq": 0})])
    checked, broken = audit.verify_chain()
    assert (checked, broken.seq) == (0, 1) and "next found is #0" in broken.reason


def test_a_row_slipped_in_after_the_newest_is_named():
    """The check covers the chain up to the head it read first (a live host appends while it
    runs); a row past the head that no append wrote is still named."""
    write_events(2)
    newest = AuditEvent.objects.get(seq=2)
    AuditEvent.objects.bulk_create([AuditEvent(**{**_fields(newest), "seq": 3})])
    checked, broken = audit.verify_chain()
    assert (checked, broken.seq) == (2, 3) and "past the chain head" in broken.reason


def _fields(event):
    return {f.attname: getattr(event, f.attname) for f in AuditEvent._meta.concrete_fields[1:]}


def test_a_long_chain_verifies():
    """Past the small integers Python caches (seq > 256), equal numbers are still equal."""
    audit.record_many([audit.event("test.bulk", details={"n": i}) for i in range(300)])
    assert audit.verify_chain(chunk_size=100) == (300, None)


@pytest.mark.django_db(transaction=True)
def test_a_failing_listener_does_not_undo_or_break_the_record():
    """The dashboard's live feed listens after the commit; its failure must not reach the
    caller whose event was recorded."""

    def broken(sender, events, **kwargs):
        raise RuntimeError("the channel layer is down")

    audit_recorded.connect(broken, dispatch_uid="test.broken")
    try:
        event = audit.record("test.listener")
    finally:
        audit_recorded.disconnect(dispatch_uid="test.broken")
    assert AuditEvent.objects.get(seq=event.seq).event_type == "test.listener"
