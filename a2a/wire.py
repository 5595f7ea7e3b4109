"""The standard A2A protocol (1.0, ProtoJSON) around our §18 payloads: agent cards, a partner's
A2A message as a §18 task request, and a partner's task (an A2AMessage and its AgentRun) as an
A2A Task. Everything built here is checked against the vendored a2a-v1.json before it leaves.

An A2A task *is* a §18 task request: its id is the request's messageId, its contextId the
trace. The §18 request and response travel as DataParts, each with a text part for people."""

import uuid

from django.db.models import Exists, OuterRef, Q

from a2a import messages, service
from a2a.models import A2AMessage
from a2a.schemas import A2AValidationError, validate_wire
from agents.models import AgentRun

PROTOCOL_VERSION = "1.0"
BINDINGS = ("JSONRPC", "HTTP+JSON")
JSON = "application/json"
# How a card tells a client the §18 contract: its agents' §18.2 cards, and the DataPart shape.
SECTION_18 = "urn:mcplet:a2a:section-18"
# A2A message and context ids are any string; ours are UUIDs: a non-UUID id is mapped to the
# same UUID every time (so a resubmission is the same task), distinct per partner.
_IDS = uuid.UUID("6f1d8a52-3c1e-4f0e-9f59-a2a000000001")

# Our run statuses and §18 response statuses → A2A task states, one to one.
ANSWERED = {
    "success": "TASK_STATE_COMPLETED",
    "partial": "TASK_STATE_COMPLETED",
    "error": "TASK_STATE_FAILED",
    "timeout": "TASK_STATE_FAILED",
    "cancelled": "TASK_STATE_CANCELED",
}
FINAL_STATES = {*ANSWERED.values(), "TASK_STATE_REJECTED"}


class Unusable(ValueError):
    """A message that is A2A, but not one this host can turn into a §18 task."""

    def __init__(self, message, path=""):
        super().__init__(message)
        self.path = path


# --- cards ----------------------------------------------------------------------------------


def _interfaces(url, tenant=""):
    return [
        {
            "url": url,
            "protocolBinding": binding,
            "protocolVersion": PROTOCOL_VERSION,
            **({"tenant": tenant} if tenant else {}),
        }
        for binding in BINDINGS
    ]


def _security():
    schemes = {
        "partnerKey": {
            "httpAuthSecurityScheme": {
                "scheme": "bearer",
                "description": "A partner key created by an operator of this host (shown once).",
            }
        },
        "partnerToken": {
            "httpAuthSecurityScheme": {
                "scheme": "bearer",
                "bearerFormat": "JWT",
                "description": "A token your own OpenID Connect provider signed, for the issuer, "
                "audience and claim an operator of this host configured for you.",
            }
        },
    }
    requirements = [{"schemes": {name: {}}} for name in schemes]  # either one
    return {"securitySchemes": schemes, "securityRequirements": requirements}


def _section_18(agents):
    return {
        "uri": SECTION_18,
        "description": "Send the §18.4 task request (or its parameters) as a DataPart; the "
        "§18.5 task response comes back as the task's artifact. params.agents: the §18.2 "
        "cards of the agents behind this card.",
        "params": {"agents": {agent.agent_id: agent.card() for agent in agents}},
    }


def skill(agent):
    """An agent as a skill: its id is the agentId, the tenant of the interfaces that reach it."""
    return {
        "id": agent.agent_id,
        "name": agent.display_name or agent.agent_id,
        "description": agent.description or agent.display_name or agent.agent_id,
        "tags": [agent.kind, f"tenant:{agent.agent_id}"],
        "inputModes": [JSON, "text/plain"],
        "outputModes": [JSON, "text/plain"],
    }


def _card(base_url, name, description, interfaces, agents, *, extended):
    card = {
        "name": name,
        "description": description,
        "supportedInterfaces": interfaces,
        "provider": {"organization": name, "url": base_url},
        "version": PROTOCOL_VERSION,
        "documentationUrl": f"{base_url}/api/docs/",
        "capabilities": {
            "streaming": True,
            "pushNotifications": True,
            "extendedAgentCard": extended,
            **({"extensions": [_section_18(agents)]} if agents else {}),
        },
        **_security(),
        "defaultInputModes": [JSON, "text/plain"],
        "defaultOutputModes": [JSON, "text/plain"],
        "skills": [skill(agent) for agent in agents],
    }
    validate_wire("AgentCard", card)
    return card


HOST_NAME = "MCPlet Host"
HOST_DESCRIPTION = (
    "An MCPlet Agent Profile host. Partners holding a key send tasks to the internal agents "
    "they are granted: the extended card lists them as skills, each with its interfaces (the "
    "skill's id as the tenant); or use an agent's own URL, /a2a/v1/<agentId>."
)


def host_card(base_url, agents=()):
    """The host's card: public with no agent listed (its interfaces name none); extended (a
    partner's) with the agents it may call as skills, and for each an interface per binding
    whose tenant is that agent — a client that reads only the cards can address any of them."""
    url = f"{base_url}/a2a/v1"
    interfaces = [i for a in agents for i in _interfaces(url, a.agent_id)] or _interfaces(url)
    return _card(base_url, HOST_NAME, HOST_DESCRIPTION, interfaces, agents, extended=True)


def agent_card(base_url, agent):
    """One internal agent's card, for a partner that may call it: its own interface URLs."""
    return _card(
        base_url,
        agent.display_name or agent.agent_id,
        agent.description or f"The agent {agent.agent_id} of this MCPlet host.",
        _interfaces(f"{base_url}/a2a/v1/{agent.agent_id}"),
        [agent],
        extended=False,
    )


# --- a partner's message → a §18 task request -------------------------------------------------


def _uuid(partner_id, value):
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return str(uuid.uuid5(_IDS, f"{partner_id}/{value}"))


def task_request(partner_id, recipient_id, message):
    """The §18 task request a partner's A2A `message` (valid against Message) asks for: a
    DataPart holding a whole §18 task request is taken as it is; otherwise the first object
    DataPart is the parameters, and text parts become the user's history."""
    if message["role"] != "ROLE_USER":
        raise Unusable("A partner's message has the role ROLE_USER.", "message.role")
    if message.get("taskId"):
        raise Unusable(
            "A task here takes one message: send a new message for new work.", "message.taskId"
        )
    data = [part["data"] for part in message["parts"] if "data" in part]
    texts = [part["text"] for part in message["parts"] if "text" in part]
    if len(data) + len(texts) != len(message["parts"]):
        raise Unusable("Only text and data parts are understood here.", "message.parts")
    if len(data) > 1 or (data and not isinstance(data[0], dict)):
        raise Unusable("Send at most one DataPart, a JSON object.", "message.parts")
    if data and data[0].get("type") == "task_request":
        return data[0]
    body = messages.task_request(
        partner_id,
        recipient_id,
        data[0] if data else {},
        message_id=_uuid(partner_id, message["messageId"]),
        context_id=_uuid(partner_id, message["contextId"]) if message.get("contextId") else None,
        history=[{"role": "user", "content": text} for text in texts] or None,
    )
    return body


# --- a partner's task → an A2A Task -----------------------------------------------------------


def _timestamp(moment):
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _agent_message(request_message, text, key):
    return {
        "messageId": str(uuid.uuid5(uuid.UUID(str(request_message.message_id)), key)),
        "contextId": str(request_message.context_id),
        "taskId": str(request_message.message_id),
        "role": "ROLE_AGENT",
        "parts": [{"text": text}],
    }


def submitted(request_message):
    """The status of a task request nothing has taken up yet."""
    return {"state": "TASK_STATE_SUBMITTED", "timestamp": _timestamp(request_message.created_at)}


def _status(request_message, response, run):
    if response is not None:
        state = ANSWERED.get(response.status, "TASK_STATE_FAILED")
        if request_message.state == A2AMessage.State.REFUSED:
            state = "TASK_STATE_REJECTED"
        status = {"state": state, "timestamp": _timestamp(response.created_at)}
        error = (response.body.get("payload") or {}).get("error")
        if error:
            status["message"] = _agent_message(request_message, error["message"], "error")
        return status
    if run is None:
        return submitted(request_message)
    status = {"state": "TASK_STATE_WORKING", "timestamp": _timestamp(run.updated_at)}
    held = run.waiting_for
    if run.status == AgentRun.Status.AWAITING_APPROVAL and held is not None:
        status["state"] = "TASK_STATE_AUTH_REQUIRED"
        text = (
            f"Waiting for a person of this host to approve {held.tool_name} with a passkey "
            f"(the approvers of {run.agent.agent_id}'s held calls), before "
            f"{_timestamp(held.expires_at)}. The task goes on by itself once approved."
        )
        status["message"] = _agent_message(request_message, text, f"held/{held.pk}")
    return status


def artifact(response):
    body = response.body
    text = f"{body['senderId']} answered: {body['status']}."
    return {
        "artifactId": str(response.message_id),
        "name": "task_response",
        "description": "The §18.5 task response.",
        "parts": [{"data": body, "mediaType": JSON}, {"text": text}],
    }


def history_length(params, path):
    """A request's `historyLength`: None (no limit), or how many of the newest messages."""
    length = params.get("historyLength")
    if length is not None and (not isinstance(length, int) or length < 0):
        raise Unusable("historyLength is a number of messages, 0 or more.", path)
    return length


def task(request_message, *, artifacts=True, seen=None, history=None):
    """The A2A Task of a partner's task request, as it stands now (`seen`: its response and
    run, when the caller has them), with the newest `history` messages (None: all)."""
    response, run = seen or service.progress(request_message)
    body = request_message.body
    result = {
        "id": str(request_message.message_id),
        "contextId": str(request_message.context_id),
        "status": _status(request_message, response, run),
        "history": [
            {
                "messageId": body["messageId"],
                "contextId": str(request_message.context_id),
                "taskId": str(request_message.message_id),
                "role": "ROLE_USER",
                "parts": [{"data": body, "mediaType": JSON}],
            }
        ],
    }
    if history is not None:
        result["history"] = result["history"][-history:] if history else []
    if response is not None and artifacts:
        result["artifacts"] = [artifact(response)]
    validate_wire("Task", result)
    return result


def _worked_between(before, after):
    """A change seen in one step that the run passed through working to make: it started
    and was held at once, or was approved and finished at once."""
    ended = after in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED")
    return (before == "TASK_STATE_SUBMITTED" and (ended or after.endswith("AUTH_REQUIRED"))) or (
        before == "TASK_STATE_AUTH_REQUIRED" and ended
    )


def _status_update(task, status):
    return {
        "statusUpdate": {"taskId": task["id"], "contextId": task["contextId"], "status": status}
    }


def changes(last, task):
    """The StreamResponse events that tell a client who last saw the status `last` how `task`
    stands now (none if it has not changed): a streaming binding's and a webhook's events."""
    status = task["status"]
    if (status["state"], status.get("message")) == (last["state"], last.get("message")):
        return []
    events = []
    if _worked_between(last["state"], status["state"]):
        events.append(_status_update(task, {**status, "state": "TASK_STATE_WORKING"}))
    for artifact_ in task.get("artifacts", []):
        update = {"taskId": task["id"], "contextId": task["contextId"], "artifact": artifact_}
        events.append({"artifactUpdate": {**update, "lastChunk": True}})
    events.append(_status_update(task, status))
    return events


def in_state(queryset, state):
    """Partner task requests whose A2A state is `state` (a TaskState name)."""
    responses = A2AMessage.objects.filter(
        reply_to=OuterRef("message_id"), type=A2AMessage.Type.TASK_RESPONSE
    )
    runs = AgentRun.objects.filter(request=OuterRef("pk"))
    if state == "TASK_STATE_REJECTED":
        return queryset.filter(state=A2AMessage.State.REFUSED)
    statuses = [status for status, name in ANSWERED.items() if name == state]
    if statuses:
        return queryset.filter(Exists(responses.filter(status__in=statuses))).exclude(
            state=A2AMessage.State.REFUSED
        )
    open_ = queryset.filter(~Exists(responses))
    if state == "TASK_STATE_SUBMITTED":
        return open_.filter(~Exists(runs))
    if state == "TASK_STATE_AUTH_REQUIRED":
        return open_.filter(Exists(runs.filter(status=AgentRun.Status.AWAITING_APPROVAL)))
    if state == "TASK_STATE_WORKING":
        return open_.filter(Exists(runs.filter(~Q(status=AgentRun.Status.AWAITING_APPROVAL))))
    return queryset.none()


def check(name, payload, prefix="params"):
    """validate_wire, with the path said from the JSON-RPC request's point of view."""
    try:
        validate_wire(name, payload)
    except A2AValidationError as exc:
        path = f"{prefix}.{exc.path}" if exc.path and not exc.path.startswith("[") else prefix
        raise Unusable(f"{exc.message} (A2A {name})", path) from None
