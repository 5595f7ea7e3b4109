"""The audit trail's single entry point: `record()`, and the chain check behind verify_audit."""

import json
from dataclasses import dataclass

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from mcplet_host import metrics
from mcplet_host.models import GENESIS_HASH, AuditChainHead, AuditEvent
from mcplet_host.signals import audit_recorded
from mcplet_host.storable import fitted, printable

EventType = AuditEvent.EventType
ActorType = AuditEvent.ActorType

SUCCESS = "SUCCESS"
FAILURE = "FAILURE"
BLOCKED = "BLOCKED"
PENDING = "PENDING"


def event(
    event_type,
    *,
    actor_type=ActorType.SYSTEM,
    actor_id="",
    target_server="",
    target_tool="",
    result=SUCCESS,
    trace_id="",
    details=None,
):
    """An unsaved event, for `record_many()`. Hostile text (a refused tool name, a path holding
    NUL, a name longer than its column) is written out, so that recording a refusal never
    fails."""
    return AuditEvent(
        trace_id=_fitted("trace_id", trace_id),
        event_type=str(event_type),
        actor_type=str(actor_type),
        actor_id=_fitted("actor_id", actor_id),
        target_server=_fitted("target_server", target_server),
        target_tool=_fitted("target_tool", target_tool),
        result=result,
        # Stored as JSON, so hash what the database will give back.
        details=json.loads(json.dumps(printable(details or {}), cls=DjangoJSONEncoder)),
    )


def _fitted(name, value):
    return fitted(AuditEvent, name, printable(str(value or "")))


def record(event_type, **fields):
    """Append one event to the chain (in the caller's transaction, if any)."""
    return record_many([event(event_type, **fields)])[0]


def record_many(events):
    """Append events to the chain in order, holding the chain head once: on PostgreSQL for
    one statement (`mcplet_audit_append`, migration 0006) unless the caller's transaction
    holds it longer; elsewhere in a transaction of its own."""
    if not events:
        return []
    if connection.vendor != "postgresql":
        _stamped(events)
        _append(events)
        _recorded(events)
        return events
    argument = in_statement(events)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT new_id, new_seq, new_prev, new_hash FROM mcplet_audit_append(%s::jsonb)",
            [argument],
        )
        appended(events, cursor.fetchall())
    return events


APPEND = "mcplet_audit_append"  # returns new_id, new_seq, new_prev, new_hash


def in_statement(events):
    """The argument of `APPEND` for `events`, for a statement of the caller's on PostgreSQL
    (mcplet_host.guarded); `appended` then takes the rows it returned."""
    _stamped(events)
    payload = [
        {
            "timestamp": item.timestamp.isoformat(),
            "digest": item.content_digest(),
            **{field: getattr(item, field) for field in COLUMNS},
        }
        for item in events
    ]
    return json.dumps(payload, cls=DjangoJSONEncoder)


def appended(events, rows):
    """`events` as `APPEND` returned them (`rows`): their ids and hashes."""
    for item, row in zip(events, rows, strict=True):
        item.pk, item.seq, item.prev_hash, item.hash = row
        item._state.adding, item._state.db = False, connection.alias
    _recorded(events)


def _stamped(events):
    now = timezone.now()
    for item in events:
        item.timestamp = now


def _recorded(events):
    metrics.audited(events)
    transaction.on_commit(
        lambda: audit_recorded.send(sender=AuditEvent, events=events), robust=True
    )


COLUMNS = (
    "trace_id",
    "event_type",
    "actor_type",
    "actor_id",
    "target_server",
    "target_tool",
    "result",
    "details",
)


def _append(events):
    with transaction.atomic():
        head, _ = AuditChainHead.objects.select_for_update().get_or_create(pk=1)
        for item in events:
            item.seq, item.prev_hash = head.last_seq + 1, head.last_hash
            item.hash = item.compute_hash()
            head.last_seq, head.last_hash = item.seq, item.hash
        AuditEvent.objects.bulk_create(events)
        head.save(update_fields=["last_seq", "last_hash"])


@dataclass
class ChainBreak:
    seq: int
    reason: str

    def __str__(self):
        return f"audit chain broken at event #{self.seq}: {self.reason}"


def verify_chain(chunk_size=2000):
    """Return (events checked, first ChainBreak or None): the chain up to its head as read
    first — a live host appends while it is checked, and the head and its events commit
    together, so every event up to that head is there to be read."""
    head = AuditChainHead.objects.filter(pk=1).first()
    events = AuditEvent.objects.order_by("seq")
    if head:
        events = events.filter(seq__lte=head.last_seq)
    expected_prev, expected_seq, count = GENESIS_HASH, 1, 0
    for event in events.iterator(chunk_size=chunk_size):
        if event.seq != expected_seq:
            return count, ChainBreak(
                expected_seq, f"event #{expected_seq} is missing (next found is #{event.seq})"
            )
        if event.prev_hash != expected_prev:
            return count, ChainBreak(
                event.seq,
                "its link to the previous event does not match (a row was removed or replaced)",
            )
        if event.hash != event.compute_hash() and event.hash != event.legacy_hash():
            return count, ChainBreak(
                event.seq, "its content does not match its hash (the row was edited)"
            )
        expected_prev, expected_seq, count = event.hash, event.seq + 1, count + 1
    if head and (head.last_seq != expected_seq - 1 or head.last_hash != expected_prev):
        return count, ChainBreak(
            head.last_seq,
            "the newest events were removed (the chain head points past the last row)",
        )
    if head:  # an append moves the head in its own transaction: a row past it was slipped in
        last = AuditEvent.objects.filter(seq__gt=head.last_seq).aggregate(last=Max("seq"))["last"]
        if last is not None and last > AuditChainHead.objects.get(pk=1).last_seq:
            return count, ChainBreak(last, "it lies past the chain head (a row added by hand)")
    return count, None
