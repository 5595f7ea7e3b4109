"""A partner's task, whichever binding carried it (the §18 REST API or the standard A2A
JSON-RPC and HTTP+JSON bindings): one code path for the grants, the §18 validation, the
provenance, idempotent resubmission, waiting and cancellation. Refusals are DRF exceptions:
each binding words them in its own error shape."""

import time
import uuid

from django.conf import settings
from rest_framework import exceptions, status

from a2a import bus
from a2a.models import A2AMessage
from a2a.schemas import A2AValidationError, validate
from agents import runner
from agents.models import Agent, AgentRun
from mcplet_host import gateway
from mcplet_host.authority import Authority
from pools.models import Pool


class Forbidden(exceptions.PermissionDenied):
    default_code = "X_FORBIDDEN"


class Invalid(exceptions.ValidationError):
    """Not the §18 schema, or not the recipient's inputSchema: a 400 that says where."""

    def __init__(self, message, path=""):
        super().__init__(message)
        self.detail, self.path = message, path


class NotCancelable(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The task has already ended."
    default_code = "X_CONFLICT"


def callable_agents(partner):
    return partner.callable_agents.filter(
        enabled=True, kind__in=[Agent.Kind.INTERNAL, Agent.Kind.DIRECTOR]
    )


def submit(partner, body):
    """Accept `partner`'s §18 task request: (the request message, True) once posted on the
    bus, or (the request first posted, False) for a resubmission of the same messageId."""
    try:
        validate("task-request", body)
    except A2AValidationError as exc:
        raise Invalid(str(exc), exc.path) from None
    if body["senderId"] != partner.agent_id:
        raise Forbidden(f"senderId must be your agentId ({partner.agent_id!r}).")
    existing = A2AMessage.objects.filter(message_id=body["messageId"]).first()
    if existing is not None:  # a resubmission: the same task, never run twice
        if existing.sender_id != partner.agent_id or not existing.external:
            raise exceptions.NotFound("No such task.")
        return existing, False
    recipient = callable_agents(partner).filter(agent_id=body["recipientId"]).first()
    if recipient is None:
        raise Forbidden(f"You may not send tasks to {body['recipientId']!r}.")
    _check_requested_access(partner, recipient, body)
    mismatch = recipient.parameters_problem(body["payload"]["parameters"])
    if mismatch:
        path, message = mismatch
        raise Invalid(f"{path}: {message}", path)
    if "contextId" not in body:
        body = {**body, "contextId": str(uuid.uuid4())}
    # Who the task acts for comes from the key, never from the body.
    return bus.post(body, Authority.of_partner(partner.agent_id), external=True), True


def _check_requested_access(partner, recipient, body):
    """Pools or tools a task asks for must lie inside partner ∩ recipient grants (§16.4)."""
    parameters = (body.get("payload") or {}).get("parameters") or {}
    pools = parameters.get("pools") or []
    tools = parameters.get("tools") or []
    if not isinstance(pools, list) or not isinstance(tools, list):
        raise Forbidden("parameters.pools and parameters.tools must be lists of names.")
    if pools:  # (no query when the task asks for none: most tasks)
        # Two filters, two joins: each pool must be held by the partner and the recipient.
        granted = set(
            Pool.objects.filter(agents=partner)
            .filter(agents=recipient)
            .values_list("name", flat=True)
        )
        outside = sorted(set(map(str, pools)) - granted)
        if outside:
            raise Forbidden(f"These pools are outside your grants: {', '.join(outside)}.")
    if tools:
        authority = Authority.of_partner(partner.agent_id)
        reachable = {tool.name for tool in gateway.tools_for(recipient, authority)}
        outside = sorted(set(map(str, tools)) - reachable)
        if outside:
            raise Forbidden(f"These tools are outside your grants: {', '.join(outside)}.")


def wait(request_message):
    """Until the task is answered, waits for an approval, or MCPLET_A2A_WAIT has passed."""
    deadline = time.monotonic() + settings.MCPLET_A2A_WAIT
    while True:
        answered = A2AMessage.objects.filter(reply_to=request_message.message_id).exists()
        run = AgentRun.objects.filter(request=request_message).first()
        waiting = run is not None and run.status == AgentRun.Status.AWAITING_APPROVAL
        if answered or waiting or time.monotonic() >= deadline:
            return
        time.sleep(0.1)


def own_tasks(partner):
    return A2AMessage.objects.filter(
        external=True, type=A2AMessage.Type.TASK_REQUEST, sender_id=partner.agent_id
    )


def own_task(partner, message_id):
    """`partner`'s task; someone else's is as unknown as a missing one."""
    message = own_tasks(partner).filter(message_id=message_id).first()
    if message is None:
        raise exceptions.NotFound("No such task.")
    return message


def cancel(partner, message):
    """End the task as cancelled (its held call rejected); NotCancelable once it has ended."""
    run = AgentRun.objects.filter(request=message).first()
    if run is not None:
        if not runner.cancel(run, f"Cancelled by the partner {partner.agent_id}."):
            raise NotCancelable()
    elif not A2AMessage.objects.filter(reply_to=message.message_id).exists():
        bus.respond(
            message,
            "cancelled",
            error={"message": "Cancelled before it started.", "code": "X_CANCELLED"},
        )
    else:
        raise NotCancelable()
