"""The A2A local bus (spec §3.4, §16.4, §18): every message persisted as the trace, signed by
the host, delivered by a Celery task inside the host boundary. The signature covers the §18
body and the message's provenance (who the work acts for, mcplet_host.authority) together. The
worker that delivers it checks the signature against the stored message, so a message forged
into the broker, or edited on its way — its body or its provenance — is refused."""

import hmac
import threading
from collections import deque
from contextlib import contextmanager

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.crypto import salted_hmac

from a2a import messages
from a2a.models import A2AMessage
from a2a.schemas import validate
from mcplet_host import audit, guarded, kept, metrics, registry
from mcplet_host.authority import HOST, Authority
from mcplet_host.celery import enqueue

DELIVER_TASK = "agents.deliver"


def signing_key():
    # Derived from SECRET_KEY, for this purpose only.
    return salted_hmac("mcplet.a2a.bus", "local message signing").digest()


def _signed(body, provenance):
    # The §18 schema allows no extra top-level key: the provenance is its own column, and the
    # signature covers both.
    return {"message": body, "provenance": provenance}


def _columns(body):
    """The columns a §18 message's own fields fill (a request's and a response's alike)."""
    return {
        "message_id": body["messageId"],
        "context_id": body["contextId"],
        "sender_id": body["senderId"],
        "recipient_id": body["recipientId"],
        "body": body,
    }


def request_values(message, authority, *, external=False):
    """The row of a task request acting with `authority`: validated, and signed with it."""
    validate("task-request", message)
    return _signed_values(message, authority, external)


def _signed_values(message, authority, external):
    """`request_values` of a message validated already (by its builder)."""
    provenance = authority.to_json()
    return {
        **_columns(message),
        "type": A2AMessage.Type.TASK_REQUEST,
        "external": external,
        "provenance": provenance,
        "signature": messages.sign(_signed(message, provenance), signing_key()),
    }


def post(message, authority, *, external=False):
    """Persist and sign a task request acting with `authority`, then hand it to a worker
    (after the commit)."""
    return post_row(request_values(message, authority, external=external))


def post_row(values, *, hand_off=False):
    """Insert a task request's row (`request_values`), then hand it to a worker after the
    commit."""
    return posted(kept.create(A2AMessage, **values), hand_off=hand_off)


def posted(row, *, hand_off=False):
    """Once a task request's row is inserted: it goes to a worker after the commit (a run's
    `hand_off` to this worker, if it delivers hand-offs here)."""
    args = [str(row.message_id), row.signature]
    transaction.on_commit(lambda: _deliver_after_commit(args, hand_off))
    metrics.bus_message("sent")
    return row


class _HandOffs(threading.local):
    queue = None  # a deque while a worker's agent task delivers hand-offs here
    taken = 0


_hand_offs = _HandOffs()


@contextmanager
def hand_offs_here():
    """Within a worker's agent task: the hand-offs its runs send are queued here, not to the
    broker (at most MCPLET_HAND_OFFS_HERE of them; after that, to the broker), for the task to
    deliver in turn once its own work is done — as Temporal's eager activities skip the task
    queue. Each is still a committed, signed request that its delivery authenticates and
    checks; a worker killed before delivering one leaves it queued, and `agents.recover`
    takes it up. What is left here when the task ends goes to the broker."""
    if _hand_offs.queue is not None:  # an eager task inside another: the outer one delivers
        yield deque()
        return
    _hand_offs.queue, _hand_offs.taken = deque(), 0
    try:
        yield _hand_offs.queue
    finally:
        left, _hand_offs.queue = _hand_offs.queue, None
        for args in left:
            enqueue(DELIVER_TASK, args)


def _deliver_after_commit(args, hand_off):
    queue = _hand_offs.queue
    if hand_off and queue is not None and _hand_offs.taken < settings.MCPLET_HAND_OFFS_HERE:
        _hand_offs.taken += 1
        queue.append(args)
    else:
        enqueue(DELIVER_TASK, args)


def send_task(sender_id, recipient_id, parameters, *, authority=HOST, **options):
    """A task from an agent of this host. `authority` is the sender's own (its run's, or the
    host's for a Director or an operator); the message carries it with the sender appended.
    `options`: the message's `context_id`, `history` and `locale`."""
    values = task_values(sender_id, recipient_id, parameters, authority=authority, **options)
    return post_row(values)


def task_values(sender_id, recipient_id, parameters, *, authority=HOST, **options):
    """The row of `send_task`'s request."""
    message = messages.task_request(sender_id, recipient_id, parameters, **options)  # validated
    return _signed_values(message, authority.then(sender_id), external=False)


# A delivery naming a genuine request with another signature than the host gave it: someone
# else's, so it must not answer (or end) the request whose genuine delivery is still to come.
FORGED = "its signature is not the one the host gave it (a forged delivery, dropped)"


def authenticate(message_id, signature):
    """(the stored request, "") if the delivery is genuine, else (request or None, reason).
    The registry's token is read with the request: its `registry_snapshot` is the registry as
    it was then."""
    try:
        token = {"registry_token": registry.token_query()}
        row = kept.get_with(
            A2AMessage, token, message_id=message_id, type=A2AMessage.Type.TASK_REQUEST
        )
    except A2AMessage.DoesNotExist:
        return None, "no such message was sent on this host's bus"
    row.registry_snapshot = registry.at(row.registry_token)  # what its delivery checks with
    if not isinstance(signature, str) or not hmac.compare_digest(
        signature.encode(), row.signature.encode()
    ):
        return row, FORGED
    if not messages.verify(_signed(row.body, row.provenance), signature, signing_key()):
        return row, "its signature does not verify"  # the stored request itself was edited
    try:
        authority = row.authority
    except ValueError:
        return row, "its provenance is not one this host writes"
    # The host writes these itself; a mismatch is a forgery the signature did not catch.
    if row.external and authority != Authority.of_partner(row.sender_id):
        return row, "its provenance does not name its sender as the partner"
    if not row.external and authority.chain[-1:] != (row.sender_id,):
        return row, "its provenance does not end with its sender"
    return row, ""


def refuse(message_id, row, reason, code="X_REFUSED"):
    """Audit a refused delivery and, when the request exists and the delivery is the host's
    own, answer it with the error (a FORGED delivery is only audited)."""
    metrics.bus_message("refused")
    audit.record(
        "a2a.message.refused",
        actor_type=audit.ActorType.AGENT if row else audit.ActorType.SYSTEM,
        actor_id=row.sender_id if row else "",
        result=audit.BLOCKED,
        trace_id=str(row.context_id) if row else "",
        details={
            "messageId": str(message_id),
            "reason": reason,
            "recipient": row.recipient_id if row else "",
            "provenance": row.provenance if row else {},
        },
    )
    if row is not None and reason != FORGED:
        row.state = A2AMessage.State.REFUSED  # not answered: the response must not say so
        A2AMessage.objects.filter(pk=row.pk).update(state=row.state)
        respond(row, "error", error={"message": f"Refused: {reason}.", "code": code})


def response_values(request, status, *, result=None, error=None):
    """The row of the task response to `request`: one per request (a unique constraint)."""
    body = messages.response_to(request.body, status, result=result, error=error)
    return {
        **_columns(body),
        "type": A2AMessage.Type.TASK_RESPONSE,
        "reply_to": request.message_id,
        "status": status,
        "external": request.external,
    }


def respond(request, status, *, result=None, error=None):
    """The one task response to `request` (a second answer returns the first)."""
    values = response_values(request, status, result=result, error=error)
    response = kept.create_unless_taken(A2AMessage, **values)
    if response is None:  # answered already (one response per request: a unique constraint)
        return A2AMessage.objects.get(
            reply_to=request.message_id, type=A2AMessage.Type.TASK_RESPONSE
        )
    if request.state != A2AMessage.State.REFUSED:
        kept.update(A2AMessage, {"pk": request.pk}, {"state": A2AMessage.State.ANSWERED})
    return response


def deliver_once(row, model, **values):
    """Mark the request delivered and create `model(**values)` (its run) with the mark, in one
    statement: the row for the one delivery that marks it, None for any other. A concurrent copy
    waits on the request's row until the first commits, then finds it marked."""
    now = timezone.now()
    queued = {"pk": row.pk, "state": A2AMessage.State.QUEUED}
    delivered = guarded.Guard(
        A2AMessage, queued, {"state": A2AMessage.State.DELIVERED, "delivered_at": now}
    )
    created = guarded.create_if_updated(delivered, model, **values)
    if created is not None:
        row.state, row.delivered_at = A2AMessage.State.DELIVERED, now
        metrics.bus_message("delivered")  # once, however often a delivery is redelivered
    return created
