"""A partner's task, whichever binding carried it (the §18 REST API or the standard A2A
JSON-RPC and HTTP+JSON bindings): one code path for the grants, the §18 validation, the
provenance, idempotent resubmission, waiting and cancellation. Refusals are DRF exceptions:
each binding words them in its own error shape."""

import time
import uuid

from rest_framework import exceptions, status

from a2a import bus
from a2a.models import A2AMessage
from a2a.schemas import A2AValidationError, validate
from agents import ending
from agents.models import Agent, AgentRun
from mcplet_host import gateway, registry
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


def callable_agent(partner, agent_id):
    """The agent `agent_id` if `partner` may call it, else None. The agents a partner may call
    are kept with the registry like its key (a grant or an agent changed is read afresh by the
    next request), so a name it may not call costs no query either. A partner authenticated by
    its key brings the snapshot its key was found in: one request, one reading."""
    snapshot = getattr(partner, "registry_snapshot", None) or registry.current()
    callable_ids = snapshot.kept(
        ("callable agents", partner.pk),
        lambda: frozenset(callable_agents(partner).values_list("agent_id", flat=True)),
    )
    return snapshot.agents({agent_id}).get(agent_id) if agent_id in callable_ids else None


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
    recipient = callable_agent(partner, body["recipientId"])
    if recipient is None:
        raise Forbidden(f"You may not send tasks to {body['recipientId']!r}.")
    _check_requested_access(partner, recipient, body)
    mismatch = recipient.parameters_problem(body["payload"]["parameters"])
    if mismatch:
        path, message = mismatch
        raise Invalid(f"{path}: {message}", path)
    if "contextId" not in body:
        body = {**body, "contextId": str(uuid.uuid4())}
    elif not _own_context(partner, body["contextId"]):
        raise Invalid(
            "This contextId is another conversation's: continue one of yours, or send none.",
            "contextId",
        )
    # Who the task acts for comes from the key, never from the body.
    return bus.post(body, Authority.of_partner(partner.agent_id), external=True), True


def _own_context(partner, context_id):
    """Whether a partner may send into the context (the trace): a new one, or one its own task
    began — never another partner's workflow, nor one of the host's own."""
    first = (
        A2AMessage.objects.filter(context_id=context_id, type=A2AMessage.Type.TASK_REQUEST)
        .order_by("created_at")
        .values_list("sender_id", "external")
        .first()
    )
    return first is None or first == (partner.agent_id, True)


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


def progress(request_message, wait=0.0):
    """(its response or None, its run or None), what a binding reports of a partner's task: as
    they stand, or, within `wait` seconds, once it is answered or waits for an approval."""
    deadline = time.monotonic() + wait
    while True:
        response = A2AMessage.objects.filter(
            reply_to=request_message.message_id, type=A2AMessage.Type.TASK_RESPONSE
        ).first()
        run = (
            AgentRun.objects.filter(request=request_message)
            .select_related("waiting_for", "agent")
            .first()
        )
        waiting = run is not None and run.status == AgentRun.Status.AWAITING_APPROVAL
        if response is not None or waiting or time.monotonic() >= deadline:
            return response, run
        time.sleep(0.1)


def first_progress(request_message, wait):
    """`progress` of a task just posted. With no wait (MCPLET_A2A_WAIT=0, a client's
    returnImmediately) nothing can have happened to it that is worth a query: it is submitted."""
    return progress(request_message, wait) if wait > 0 else (None, None)


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
        if not ending.cancel(run, f"Cancelled by the partner {partner.agent_id}."):
            raise NotCancelable()
    elif not A2AMessage.objects.filter(reply_to=message.message_id).exists():
        bus.respond(
            message,
            "cancelled",
            error={"message": "Cancelled before it started.", "code": "X_CANCELLED"},
        )
    else:
        raise NotCancelable()
