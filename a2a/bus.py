"""The A2A local bus (spec §3.4, §16.4, §18): every message persisted as the trace, signed by
the host, delivered by a Celery task inside the host boundary. The worker that delivers it
checks the signature against the stored message, so a message forged into the broker, or
edited on its way, is refused."""

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.crypto import salted_hmac

from a2a import messages
from a2a.models import A2AMessage
from a2a.schemas import validate
from mcplet_host import audit
from mcplet_host.celery import enqueue

DELIVER_TASK = "agents.deliver"


def signing_key():
    # Derived from SECRET_KEY, for this purpose only.
    return salted_hmac("mcplet.a2a.bus", "local message signing").digest()


def post(message, *, external=False):
    """Persist and sign a task request, then hand it to a worker (after the commit)."""
    validate("task-request", message)
    row = A2AMessage.objects.create(
        message_id=message["messageId"],
        context_id=message["contextId"],
        type=A2AMessage.Type.TASK_REQUEST,
        sender_id=message["senderId"],
        recipient_id=message["recipientId"],
        body=message,
        external=external,
        signature=messages.sign(message, signing_key()),
    )
    args = [str(row.message_id), row.signature]
    transaction.on_commit(lambda: enqueue(DELIVER_TASK, args))
    return row


def send_task(sender_id, recipient_id, parameters, *, context_id=None, history=None, locale=None):
    return post(
        messages.task_request(
            sender_id,
            recipient_id,
            parameters,
            context_id=context_id,
            history=history,
            locale=locale,
        )
    )


def authenticate(message_id, signature):
    """(the stored request, "") if the delivery is genuine, else (request or None, reason)."""
    row = A2AMessage.objects.filter(
        message_id=message_id, type=A2AMessage.Type.TASK_REQUEST
    ).first()
    if row is None:
        return None, "no such message was sent on this host's bus"
    if not messages.verify(row.body, signature, signing_key()):
        return row, "its signature does not verify"
    return row, ""


def refuse(message_id, row, reason):
    """Audit a refused delivery and, when the request exists, answer it with the error."""
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
        },
    )
    if row is not None:
        A2AMessage.objects.filter(pk=row.pk).update(state=A2AMessage.State.REFUSED)
        respond(row, "error", error={"message": f"Refused: {reason}.", "code": "X_REFUSED"})


def respond(request, status, *, result=None, error=None):
    """The one task response to `request` (a second answer returns the first)."""
    body = messages.task_response(request.body, status, result=result, error=error)
    try:
        with transaction.atomic():
            response = A2AMessage.objects.create(
                message_id=body["messageId"],
                context_id=body["contextId"],
                type=A2AMessage.Type.TASK_RESPONSE,
                sender_id=body["senderId"],
                recipient_id=body["recipientId"],
                reply_to=request.message_id,
                body=body,
                status=status,
                external=request.external,
            )
    except IntegrityError:
        return A2AMessage.objects.get(
            reply_to=request.message_id, type=A2AMessage.Type.TASK_RESPONSE
        )
    if request.state != A2AMessage.State.REFUSED:
        A2AMessage.objects.filter(pk=request.pk).update(state=A2AMessage.State.ANSWERED)
    return response


def mark_delivered(row):
    A2AMessage.objects.filter(pk=row.pk, state=A2AMessage.State.QUEUED).update(
        state=A2AMessage.State.DELIVERED, delivered_at=timezone.now()
    )
