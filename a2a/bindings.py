"""The standard A2A 1.0 bindings for partner agents: the agent cards, JSON-RPC and HTTP+JSON.
Thin views over a2a.service (the same code path as POST /a2a/tasks: grants, provenance, rate
limits, audit, idempotency, §18 validation) and a2a.wire (the protocol's shapes, validated).

A partner addresses one internal agent by its URL, /a2a/v1/<agentId> (its card, from
/a2a/v1/<agentId>/.well-known/agent-card.json, lists exactly that URL), or at /a2a/v1 by
naming it as the request's tenant. Authentication, the rate limit and a body too large are
refused in HTTP (401, 429, 413) before any JSON-RPC is read, and a call outside the grants is
HTTP 403; everything else is the binding's own error."""

import json
import uuid

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.http import JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.response import Response

from a2a import events, push, service, wire
from a2a.api import PartnerView

PAGE_SIZE, MAX_PAGE_SIZE = 50, 100
JSON = "application/json"
HEARTBEAT = 15  # seconds of silence before a stream says it is alive (and re-reads its task)

# JSON-RPC error codes of A2A 1.0 (and JSON-RPC 2.0's own).
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
TASK_NOT_FOUND, TASK_NOT_CANCELABLE, UNSUPPORTED_OPERATION = -32001, -32002, -32004
VERSION_NOT_SUPPORTED = -32009


def base_url(request):
    return request.build_absolute_uri("/").rstrip("/")


@csrf_exempt  # a POST is a 405 in JSON's place, not the CSRF page: nothing here takes one
@require_safe
def public_card(request):
    """/.well-known/agent-card.json: the host, its bindings and how to authenticate; no agent
    is listed (partners get theirs in the extended card)."""
    return JsonResponse(wire.host_card(base_url(request)))


class Unsupported(Exception):
    """An operation the task's state does not allow."""


class VersionNotSupported(Exception):
    """The client speaks an A2A version (its A2A-Version header) this host does not."""


def check_version(request):
    """A request naming another A2A version than the host's is refused, not served as 1.0 (one
    naming none is served: curl, the docs' examples)."""
    asked = request.headers.get("A2A-Version", "").strip()
    if asked and asked.split(".")[:2] not in (wire.PROTOCOL_VERSION.split("."), ["1"]):
        raise VersionNotSupported(
            f"This host speaks A2A {wire.PROTOCOL_VERSION}, not {asked[:20]!r}."
        )


class EventStreamRenderer(BaseRenderer):
    """A reply to a client asking for a stream that is not one (an error): one event."""

    media_type = "text/event-stream"
    format = "sse"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return Stream.sse(data)


class BindingView(PartnerView):
    """What the JSON-RPC and HTTP+JSON views share: the agent a request is for, and the
    operations themselves (each returns a ProtoJSON value, or raises)."""

    renderer_classes = [*PartnerView.renderer_classes, EventStreamRenderer]

    def agent(self, agent_id):
        agent = service.callable_agent(self.partner, agent_id)
        if agent is None:  # an agent that does not exist is as closed as one not granted
            raise service.Forbidden(f"You may not send tasks to {agent_id!r}.")
        return agent

    def tasks(self, agent_id):
        tasks = service.own_tasks(self.partner)
        return tasks.filter(recipient_id=agent_id) if agent_id else tasks

    def task_row(self, agent_id, task_id):
        try:
            task_id = uuid.UUID(str(task_id))
        except ValueError:
            raise exceptions.NotFound("No such task.") from None
        row = self.tasks(agent_id).filter(message_id=task_id).first()
        if row is None:
            raise exceptions.NotFound("No such task.")
        return row

    def send_message(self, params, agent_id, *, stream=False):
        wire.check("SendMessageRequest", params)
        if agent_id:
            self.agent(agent_id)
        body = wire.task_request(self.partner.agent_id, agent_id or "", params["message"])
        if agent_id and body["recipientId"] != agent_id:
            raise wire.Unusable(
                f"The task request's recipientId is not {agent_id!r}, the agent you address.",
                "params.message.parts",
            )
        if not body["recipientId"]:
            raise wire.Unusable(
                "Name the agent: its URL /a2a/v1/<agentId>, or the tenant, or a §18 task "
                "request as the DataPart.",
                "params.tenant",
            )
        configuration = params.get("configuration") or {}
        history = wire.history_length(configuration, "params.configuration.historyLength")
        webhook = configuration.get("taskPushNotificationConfig")
        if webhook is not None:
            push.check(self.partner, webhook, "", "params.configuration.taskPushNotificationConfig")
        with transaction.atomic():  # the webhook exists before any worker takes the task up
            row, created = service.submit(self.partner, body)
            if webhook is not None and created:  # (a resubmission registered it the first time)
                push.register(self.partner, row, webhook, baseline=wire.submitted(row))
        self.trace_id = str(row.context_id)
        if stream:
            return Stream(row)
        if not created:  # a resubmission: the task as it stands
            return {"task": wire.task(row, history=history)}
        wait = 0 if configuration.get("returnImmediately") else settings.MCPLET_A2A_WAIT
        seen = service.first_progress(row, wait)
        return {"task": wire.task(row, seen=seen, history=history)}

    def send_streaming_message(self, params, agent_id):
        return self.send_message(params, agent_id, stream=True)

    def subscribe(self, params, agent_id):
        wire.check("SubscribeToTaskRequest", params)
        row = self.task_row(agent_id, params.get("id", ""))
        if wire.task(row, artifacts=False)["status"]["state"] in wire.FINAL_STATES:
            raise Unsupported("The task has ended: GetTask tells how.")
        return Stream(row)

    def get_task(self, params, agent_id):
        wire.check("GetTaskRequest", params)
        history = wire.history_length(params, "params.historyLength")
        return wire.task(self.task_row(agent_id, params.get("id", "")), history=history)

    def cancel_task(self, params, agent_id):
        wire.check("CancelTaskRequest", params)
        row = self.task_row(agent_id, params.get("id", ""))
        service.cancel(self.partner, row)
        return wire.task(row)

    def list_tasks(self, params, agent_id):
        wire.check("ListTasksRequest", params)
        rows = self.tasks(agent_id).order_by("-created_at", "-pk")
        if params.get("contextId"):
            try:
                rows = rows.filter(context_id=uuid.UUID(params["contextId"]))
            except ValueError:
                rows = rows.none()
        if params.get("status", "TASK_STATE_UNSPECIFIED") != "TASK_STATE_UNSPECIFIED":
            rows = wire.in_state(rows, params["status"])
        size = params.get("pageSize") or PAGE_SIZE
        if not 1 <= size <= MAX_PAGE_SIZE:
            raise wire.Unusable(f"pageSize is from 1 to {MAX_PAGE_SIZE}.", "params.pageSize")
        token = params.get("pageToken") or "0"
        if not (token.isascii() and token.isdigit() and len(token) <= 9):
            raise wire.Unusable("Not a page token this host gave.", "params.pageToken")
        start, total = int(token), rows.count()
        page = list(rows[start : start + size])
        artifacts = bool(params.get("includeArtifacts"))
        history = wire.history_length(params, "params.historyLength")
        result = {
            "tasks": [wire.task(row, artifacts=artifacts, history=history) for row in page],
            "nextPageToken": str(start + size) if start + size < total else "",
            "pageSize": size,
            "totalSize": total,
        }
        wire.validate_wire("ListTasksResponse", result)
        return result

    def create_push_config(self, params, agent_id):
        wire.check("TaskPushNotificationConfig", params)
        row = self.task_row(agent_id, params.get("taskId", ""))
        if wire.task(row, artifacts=False)["status"]["state"] in wire.FINAL_STATES:
            raise Unsupported("The task has ended: GetTask tells how.")
        push.check(self.partner, params, str(row.context_id), "params")
        return push.register(self.partner, row, params, tenant=params.get("tenant", ""))

    def push_configs(self, agent_id, params):
        return self.task_row(agent_id, params.get("taskId", "")).push_configs

    def get_push_config(self, params, agent_id):
        wire.check("GetTaskPushNotificationConfigRequest", params)
        config = self.push_configs(agent_id, params).filter(config_id=params["id"]).first()
        if config is None:
            raise exceptions.NotFound("No such push notification config.")
        return config.as_wire(params.get("tenant", ""))

    def list_push_configs(self, params, agent_id):
        wire.check("ListTaskPushNotificationConfigsRequest", params)
        configs = self.push_configs(agent_id, params).all()
        result = {"configs": [c.as_wire(params.get("tenant", "")) for c in configs]}
        wire.validate_wire("ListTaskPushNotificationConfigsResponse", result)
        return result

    def delete_push_config(self, params, agent_id):
        wire.check("DeleteTaskPushNotificationConfigRequest", params)
        push.forget(self.partner, self.push_configs(agent_id, params), params["id"])
        return {}  # google.protobuf.Empty

    def extended_card(self, params, agent_id):
        if agent_id:
            return wire.agent_card(base_url(self.request), self.agent(agent_id))
        agents = service.callable_agents(self.partner)
        return wire.host_card(base_url(self.request), list(agents))

    def finalize_response(self, request, response, *args, **kwargs):
        response.trace_id = getattr(self, "trace_id", "")
        return super().finalize_response(request, response, *args, **kwargs)


class Stream:
    """A task to stream (Server-Sent Events): the Task, then each change of its status and its
    artifact, until it ends. Served on the event loop under ASGI, listening to a2a.events."""

    def __init__(self, row):
        self.row = row

    def response(self, wrap):
        response = StreamingHttpResponse(self.events(wrap), content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response

    async def events(self, wrap):
        row = self.row
        read = sync_to_async(wire.task)
        async with events.Listener(str(row.context_id)) as listener:
            task = await read(row)
            yield self.sse(wrap({"task": task}))
            last = task["status"]
            while last["state"] not in wire.FINAL_STATES:
                announced = await listener.changed(HEARTBEAT)
                task = await read(row)
                changes = wire.changes(last, task)
                if not changes and not announced:
                    yield b": alive\n\n"
                for event in changes:
                    yield self.sse(wrap(event))
                last = task["status"]

    @staticmethod
    def sse(event):
        return f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode()


@extend_schema(exclude=True)  # the OpenAPI page describes the §18 API
class AgentCard(BindingView):
    """/a2a/v1/<agentId>/.well-known/agent-card.json: the card an SDK client resolves from
    the agent's URL (with the partner key)."""

    def get(self, request, agent_id):
        return Response(self.extended_card({}, agent_id))


# --- JSON-RPC 2.0 -------------------------------------------------------------------------------


@extend_schema(exclude=True)  # the OpenAPI page describes the §18 API
class JsonRpc(BindingView):
    METHODS = {
        "SendMessage": BindingView.send_message,
        "GetTask": BindingView.get_task,
        "ListTasks": BindingView.list_tasks,
        "CancelTask": BindingView.cancel_task,
        "GetExtendedAgentCard": BindingView.extended_card,
        "SendStreamingMessage": BindingView.send_streaming_message,
        "SubscribeToTask": BindingView.subscribe,
        "CreateTaskPushNotificationConfig": BindingView.create_push_config,
        "GetTaskPushNotificationConfig": BindingView.get_push_config,
        "ListTaskPushNotificationConfigs": BindingView.list_push_configs,
        "DeleteTaskPushNotificationConfig": BindingView.delete_push_config,
    }

    def post(self, request, agent_id=None):
        try:
            rpc = request.data
        except exceptions.ParseError as exc:  # (a body too large stays HTTP 413)
            return self.error(None, PARSE_ERROR, str(exc.detail))
        if not (
            isinstance(rpc, dict)
            and rpc.get("jsonrpc") == "2.0"
            and isinstance(rpc.get("method"), str)
            and isinstance(rpc.get("params", {}), dict)
            # JSON-RPC 2.0's id: a string, a number or null (JSON's true is no number)
            and isinstance(rpc.get("id"), str | int | float | type(None))
            and not isinstance(rpc.get("id"), bool)
        ):
            return self.error(None, INVALID_REQUEST, "Not a JSON-RPC 2.0 request object.")
        rpc_id, params = rpc.get("id"), rpc.get("params", {})
        method = self.METHODS.get(rpc["method"])
        if method is None:
            return self.error(rpc_id, METHOD_NOT_FOUND, f"No method {rpc['method']!r} here.")
        tenant = params.get("tenant")
        if agent_id and tenant and tenant != agent_id:
            return self.error(
                rpc_id, INVALID_PARAMS, f"The tenant is not {agent_id!r}, the agent you address."
            )
        try:
            check_version(self.request)
            result = method(self, params, agent_id or tenant)
        except VersionNotSupported as exc:
            return self.error(rpc_id, VERSION_NOT_SUPPORTED, str(exc))
        except (wire.Unusable, service.Invalid) as exc:
            return self.error(rpc_id, INVALID_PARAMS, str(exc), path=exc.path)
        except exceptions.NotFound as exc:
            return self.error(rpc_id, TASK_NOT_FOUND, str(exc.detail))
        except service.NotCancelable as exc:
            return self.error(rpc_id, TASK_NOT_CANCELABLE, str(exc.detail))
        except Unsupported as exc:
            return self.error(rpc_id, UNSUPPORTED_OPERATION, str(exc))
        if isinstance(result, Stream):
            return result.response(lambda event: {"jsonrpc": "2.0", "id": rpc_id, "result": event})
        return Response({"jsonrpc": "2.0", "id": rpc_id, "result": result})

    def error(self, rpc_id, code, message, path=""):
        error = {"code": code, "message": message, **({"data": {"path": path}} if path else {})}
        return Response({"jsonrpc": "2.0", "id": rpc_id, "error": error})


# --- HTTP+JSON ----------------------------------------------------------------------------------


@extend_schema(exclude=True)  # the OpenAPI page describes the §18 API
class Rest(BindingView):
    """The HTTP+JSON binding: /a2a/v1[/<agentId>]/message:send, message:stream, tasks,
    tasks/<id>, tasks/<id>:cancel, tasks/<id>:subscribe and extendedAgentCard. Errors are
    google.rpc.Status bodies whose ErrorInfo reason names the A2A error."""

    QUERY_INTEGERS = ("pageSize", "historyLength")

    def post(self, request, agent_id=None, resource=None, verb=None, task_id=None, config_id=None):
        if resource == "task" and verb is not None:
            operation = BindingView.cancel_task if verb == "cancel" else BindingView.subscribe
            return self.perform(operation, {"id": task_id}, agent_id)
        if resource == "message" or (resource == "push" and config_id is None):
            try:
                params = request.data
            except exceptions.ParseError as exc:
                return self.error(400, "INVALID_ARGUMENT", "INVALID_REQUEST", str(exc.detail))
            if resource == "push":
                if isinstance(params, dict) and params.get("taskId", task_id) != task_id:
                    return self.error(
                        400, "INVALID_ARGUMENT", "INVALID_PARAMS", "taskId is not the URL's task."
                    )
                params = {**params, "taskId": task_id} if isinstance(params, dict) else params
                return self.perform(BindingView.create_push_config, params, agent_id)
            operation = (
                BindingView.send_message if verb == "send" else BindingView.send_streaming_message
            )
            return self.perform(operation, params, agent_id)
        return self.not_allowed(resource, verb, config_id)

    def delete(self, request, agent_id=None, resource=None, task_id=None, config_id=None, **_):
        if resource != "push" or config_id is None:
            return self.not_allowed(resource, None, config_id)
        params = {"taskId": task_id, "id": config_id}
        return self.perform(BindingView.delete_push_config, params, agent_id)

    def get(self, request, agent_id=None, resource=None, verb=None, task_id=None, config_id=None):
        if resource == "message" or verb == "cancel":
            return self.not_allowed(resource, verb, config_id)
        if verb == "subscribe":  # as the SDK's own server routes it: GET or POST
            return self.perform(BindingView.subscribe, {"id": task_id}, agent_id)
        if resource == "card":
            return self.perform(BindingView.extended_card, {}, agent_id)
        if resource == "push":
            if config_id is not None:
                params = {"taskId": task_id, "id": config_id}
                return self.perform(BindingView.get_push_config, params, agent_id)
            return self.perform(BindingView.list_push_configs, {"taskId": task_id}, agent_id)
        query = {}
        for name, value in request.query_params.items():
            if name in self.QUERY_INTEGERS and value.lstrip("-").isdigit():
                value = int(value)
            elif name == "includeArtifacts" and value in ("true", "false"):
                value = value == "true"
            query[name] = value
        if task_id is not None:
            return self.perform(BindingView.get_task, {**query, "id": task_id}, agent_id)
        return self.perform(BindingView.list_tasks, query, agent_id)

    @staticmethod
    def allowed(resource, verb, config_id):
        """The methods a URL of this binding takes."""
        if resource == "message":
            return "POST"
        if resource == "task":
            return {"cancel": "POST", "subscribe": "GET, POST"}.get(verb, "GET")
        if resource == "push":
            return "GET, DELETE" if config_id is not None else "GET, POST"
        return "GET"

    def not_allowed(self, resource, verb, config_id):
        allowed = self.allowed(resource, verb, config_id)
        message = f"{self.request.method} is not an operation here: {allowed}."
        self.headers["Allow"] = allowed  # (DRF's would name every method of the view)
        return self.error(405, "UNIMPLEMENTED", "METHOD_NOT_ALLOWED", message)

    def perform(self, operation, params, agent_id):
        if not isinstance(params, dict):
            return self.error(400, "INVALID_ARGUMENT", "INVALID_REQUEST", "Send a JSON object.")
        try:
            check_version(self.request)
            result = operation(self, params, agent_id)
        except VersionNotSupported as exc:
            return self.error(400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED", str(exc))
        except (wire.Unusable, service.Invalid) as exc:
            return self.error(400, "INVALID_ARGUMENT", "INVALID_PARAMS", str(exc), exc.path)
        except exceptions.NotFound as exc:
            return self.error(404, "NOT_FOUND", "TASK_NOT_FOUND", str(exc.detail))
        except service.NotCancelable as exc:
            return self.error(400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE", str(exc.detail))
        except Unsupported as exc:
            return self.error(400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION", str(exc))
        if isinstance(result, Stream):
            return result.response(lambda event: event)
        return Response(result)

    def error(self, http_status, status, reason, message, path=""):
        info = {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "a2a-protocol.org",
            **({"metadata": {"path": path}} if path else {}),
        }
        body = {"code": http_status, "status": status, "message": message, "details": [info]}
        # JSON even to a client that asked for a stream: it reads an error's status and body.
        self.request.accepted_renderer, self.request.accepted_media_type = JSONRenderer(), JSON
        return Response({"error": body}, status=http_status)
