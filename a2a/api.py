"""The external A2A endpoint for partner agents (spec §3.6, §16.1, §16.4, §18): DRF views that
accept §18 payloads from partners holding a key, never reaching beyond their grants."""

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.throttling import SimpleRateThrottle
from rest_framework.views import APIView, exception_handler

from a2a import identity, service
from a2a.models import KEY_PREFIX, PartnerKey
from a2a.schemas import A2AValidationError, validate
from a2a.webhooks import CONTENT_TYPE as A2A_JSON  # A2A's media type, beside application/json
from agents.models import Agent
from mcplet_host import audit, metrics, ratelimit, storable

MAX_BODY = 1024 * 1024


# --- who is calling ----------------------------------------------------------------------------


class Partner:
    """The authenticated partner, as DRF's request.user (by its key, or a token its issuer
    signed: then `key` is None)."""

    is_authenticated = True

    def __init__(self, agent, key=None):
        self.agent, self.key = agent, key


class PartnerKeyAuthentication(BaseAuthentication):
    """A partner key, or a JWT from the partner's own identity provider (a2a/identity.py)."""

    keyword = b"bearer"

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword:
            raise exceptions.NotAuthenticated(
                "Send your partner key as 'Authorization: Bearer <key>'."
            )
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(
                "The Authorization header must be 'Bearer <key>'."
            )
        token = parts[1].decode(errors="replace")
        if not token.startswith(KEY_PREFIX) and identity.looks_like_jwt(token):
            try:
                agent = identity.partner_for(token)
            except identity.Invalid as exc:
                raise exceptions.AuthenticationFailed(
                    f"This token is not accepted: {exc}."
                ) from None
            if not agent.enabled:
                raise exceptions.AuthenticationFailed("This partner is disabled.")
            return Partner(agent), None
        key, problem = PartnerKey.lookup(token)
        if problem:
            messages = {
                "unknown": "This partner key is not known.",
                "revoked": "This partner key was revoked.",
                "expired": "This partner key has expired.",
            }
            raise exceptions.AuthenticationFailed(messages[problem])
        if not key.agent.enabled or key.agent.kind != Agent.Kind.EXTERNAL:
            raise exceptions.AuthenticationFailed("This partner is disabled.")
        return Partner(key.agent, key), key

    def authenticate_header(self, request):
        return 'Bearer realm="mcplet-a2a"'


class PartnerKeyScheme(OpenApiAuthenticationExtension):
    target_class = PartnerKeyAuthentication
    name = "partnerKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A partner key created by an operator (shown once).",
        }


class PartnerRateThrottle(SimpleRateThrottle):
    """Per partner (the rate is the `partner` scope's), shared by all web processes: the pools'
    sliding window of atomic counters in the cache (Redis), not DRF's list of timestamps."""

    scope = "partner"
    wait_ms = None

    @staticmethod
    def name(agent_id):
        return f"partner:{agent_id}"

    def allow_request(self, request, view):
        partner = getattr(request, "user", None)
        if self.rate is None or not isinstance(partner, Partner):
            return True
        name = self.name(partner.agent.agent_id)
        self.wait_ms = ratelimit.take(name, self.num_requests, self.duration)
        return self.wait_ms is None

    def wait(self):
        return None if self.wait_ms is None else self.wait_ms / 1000


class StorableJSON:
    """JSON the host can store and sign: no infinite numbers, lone surrogates or NUL
    characters, no nesting deeper than storable.MAX_DEPTH (issue 14); its size is checked
    before (`check_body`)."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise UnusableJSON(f"it is nested deeper than {storable.MAX_DEPTH} levels") from None
        unusable = storable.problem(data)
        if unusable:
            path, why = unusable
            raise UnusableJSON(f"{path or 'the body'}: {why}")
        return data


class LimitedJSONParser(StorableJSON, JSONParser):
    pass


class A2AJSONParser(StorableJSON, JSONParser):
    """The A2A binding's own media type (the a2a-sdk's servers and the host's webhooks send it)."""

    media_type = A2A_JSON


class A2AJSONRenderer(JSONRenderer):
    media_type = A2A_JSON


def check_body(meta):
    """Refuse a body before it is read: Django refuses one over 2.5 MiB with an HTML page, and
    reads a chunked one (no Content-Length) as empty, which would be refused as the wrong one."""
    try:
        length = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise exceptions.ParseError("The Content-Length is not a number.") from None
    if length > MAX_BODY:
        raise PayloadTooLarge()
    if not length and "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower():
        raise LengthRequired()


class UnusableJSON(exceptions.ParseError):
    """JSON, but not JSON the host can store or sign."""


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = f"The body is larger than {MAX_BODY // 1024} KiB."
    default_code = "X_PAYLOAD_TOO_LARGE"


class LengthRequired(exceptions.APIException):
    status_code = status.HTTP_411_LENGTH_REQUIRED
    default_detail = "Send the body with a Content-Length (at most 1 MiB), not chunked."
    default_code = "VALIDATION_ERROR"


CODES = {
    400: "VALIDATION_ERROR",
    401: "AUTH_REQUIRED",
    403: "X_FORBIDDEN",
    404: "NOT_FOUND",
    405: "X_METHOD_NOT_ALLOWED",
    406: "VALIDATION_ERROR",
    409: "X_CONFLICT",
    411: "VALIDATION_ERROR",
    413: "X_PAYLOAD_TOO_LARGE",
    415: "VALIDATION_ERROR",
    429: "RATE_LIMITED",
}


ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "path": {"type": "string"},
                "retryable": {"type": "boolean"},
                "retry_after_ms": {"type": "integer"},
            },
        }
    },
}
ERROR_TEXT = {
    400: "VALIDATION_ERROR: a body that is not JSON or not the §18.6 schema (with the offending "
    "path), or a request refused before any view (a Host this server does not serve, a NUL)",
    401: "AUTH_REQUIRED or AUTH_FAILED: no, unknown, expired or revoked key (WWW-Authenticate)",
    403: "X_FORBIDDEN: outside the partner's grants",
    404: "NOT_FOUND",
    413: "X_PAYLOAD_TOO_LARGE: a body over 1 MiB",
    415: "VALIDATION_ERROR: a body that is not application/json",
    429: "RATE_LIMITED: over the partner's rate (Retry-After, retry_after_ms)",
}


def errors(*codes):
    """The documented error responses of an operation: 400, 401 and 429 always, and `codes`."""
    return {
        code: OpenApiResponse(ERROR_SCHEMA, description=ERROR_TEXT[code])
        for code in sorted({400, 401, 429, *codes})
    }


def task_links(result, generator, request, public):
    """OpenAPI links (drf-spectacular's postprocessing hook: it has no decorator for them): the
    messageId a task was sent with is the id its status and its cancel take, so a client
    generator, or Schemathesis's state machine, can follow from one to the other."""
    by_id = {"message_id": "$request.body#/messageId"}
    task = {"operationId": "a2a_tasks_retrieve", "parameters": by_id}
    cancel = {"operationId": "a2a_tasks_cancel_create", "parameters": by_id}
    paths = result["paths"]
    for code in ("200", "202"):
        paths["/a2a/tasks"]["post"]["responses"][code]["links"] = {
            "GetTask": task,
            "CancelTask": cancel,
        }
    paths["/a2a/tasks/{message_id}"]["get"]["responses"]["202"]["links"] = {
        "CancelTask": {**cancel, "parameters": {"message_id": "$request.path.message_id"}}
    }
    return result


def error_body(code, message, **extra):
    return {"error": {"code": code, "message": message, **extra}}


def handle_exception(exc, context):
    """Errors in the §9.1 / §18.5 vocabulary: {"error": {"code", "message", ...}}."""
    response = exception_handler(exc, context)
    if response is None:
        return None
    detail = response.data.get("detail") if isinstance(response.data, dict) else response.data
    code = CODES.get(response.status_code, "UNKNOWN_ERROR")
    if response.status_code == 401 and isinstance(exc, exceptions.AuthenticationFailed):
        code = "AUTH_FAILED"
    extra = {}
    if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
        extra = {"retryable": True, "retry_after_ms": int(exc.wait * 1000)}
    if isinstance(exc, service.Invalid):
        detail, extra = exc.detail, {"path": exc.path}
    elif isinstance(exc, UnusableJSON):
        detail = f"The body cannot be accepted: {detail}"
    elif isinstance(exc, exceptions.ParseError):
        detail = f"The body is not valid JSON: {detail}"
    response.data = error_body(code, str(detail), **extra)
    return response


# --- the views ---------------------------------------------------------------------------------


class PartnerView(APIView):
    authentication_classes = [PartnerKeyAuthentication]
    permission_classes = [IsAuthenticated]  # authentication refuses first; this documents it
    throttle_classes = [PartnerRateThrottle]
    parser_classes = [LimitedJSONParser, A2AJSONParser]
    renderer_classes = [JSONRenderer, A2AJSONRenderer]  # errors are JSON, never a browsable page

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # who asks, and their rate, first
        check_body(request.META)

    def get_exception_handler(self):
        return handle_exception

    def finalize_response(self, request, response, *args, **kwargs):
        """Every call, authenticated or refused, leaves one audit event with the partner's id."""
        response = super().finalize_response(request, response, *args, **kwargs)
        partner = getattr(request, "_user", None)
        known = isinstance(partner, Partner)
        data = getattr(response, "data", None)  # (none in a stream)
        error = data.get("error") if isinstance(data, dict) else None
        metrics.partner_request(self, request.method, response.status_code)
        audit.record(
            "a2a.partner.request",
            actor_type=audit.ActorType.PARTNER,
            actor_id=partner.agent.agent_id if known else "",
            result=audit.SUCCESS if response.status_code < 400 and not error else audit.BLOCKED,
            trace_id=getattr(response, "trace_id", ""),
            details={
                "method": request.method,
                "path": request.path,
                "status": response.status_code,
                **({"code": error["code"], "message": error["message"]} if error else {}),
            },
        )
        return response

    @property
    def partner(self):
        return self.request.user.agent


def _task_state(request_message, seen=None):
    """The final response (200) or the running state (202) of a partner's task (`seen`: its
    response and run, when the caller has them)."""
    response, run = seen or service.progress(request_message)
    if response is not None:
        return Response(response.body, status=status.HTTP_200_OK)
    state = run.status if run else request_message.state
    body = {
        "messageId": str(request_message.message_id),
        "contextId": str(request_message.context_id),
        "state": state,
    }
    if run is not None and run.waiting_for is not None:
        body["awaiting"] = {
            "tool": run.waiting_for.tool_name,
            "expiresAt": run.waiting_for.expires_at,
        }
    location = f"/a2a/tasks/{request_message.message_id}"
    return Response(body, status=status.HTTP_202_ACCEPTED, headers={"Location": location})


class TaskList(PartnerView):
    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={
            200: OpenApiTypes.OBJECT,
            202: OpenApiTypes.OBJECT,
            # 404: a messageId already used by another partner
            **errors(400, 403, 404, 413, 415),
        },
        summary="Send an A2ATaskRequest (§18.4); get the A2ATaskResponse (§18.5) or 202",
    )
    def post(self, request):
        request_message, created = service.submit(self.partner, request.data)
        if not created:  # a resubmission: the task as it stands
            return _task_state(request_message)
        seen = service.first_progress(request_message, settings.MCPLET_A2A_WAIT)
        return _task_state(request_message, seen)


class TaskDetail(PartnerView):
    @extend_schema(
        responses={200: OpenApiTypes.OBJECT, 202: OpenApiTypes.OBJECT, **errors(404)},
        summary="The task's A2ATaskResponse, or 202 with its state",
    )
    def get(self, request, message_id):
        return _task_state(service.own_task(self.partner, message_id))


class TaskCancel(PartnerView):
    @extend_schema(
        request=None,
        responses={200: OpenApiTypes.OBJECT, 409: OpenApiTypes.OBJECT, **errors(404)},
        summary="Cancel the task; its response's status becomes cancelled",
    )
    def post(self, request, message_id):
        message = service.own_task(self.partner, message_id)
        try:
            service.cancel(self.partner, message)
        except service.NotCancelable:
            response = _task_state(message)
            response.status_code = status.HTTP_409_CONFLICT
            return response
        return _task_state(message)


class AgentList(PartnerView):
    @extend_schema(
        operation_id="a2a_agents_list",
        responses={200: OpenApiTypes.OBJECT, **errors()},
        summary="Cards of the agents you may call",
    )
    def get(self, request):
        return Response(
            {"agents": [agent.card() for agent in service.callable_agents(self.partner)]}
        )


class AgentDetail(PartnerView):
    @extend_schema(
        parameters=[
            OpenApiParameter("agent_id", str, OpenApiParameter.PATH, pattern=r"^[-a-zA-Z0-9_]+$")
        ],
        responses={200: OpenApiTypes.OBJECT, **errors(404)},
        summary="One agent's card (§18.2)",
    )
    def get(self, request, agent_id):
        agent = service.callable_agent(self.partner, agent_id)
        if agent is None:
            raise exceptions.NotFound("No agent you may call has this agentId.")
        return Response(agent.card())


class OwnCard(PartnerView):
    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT, **errors(400, 403, 413, 415)},
        summary="Advertise your own A2AAgentCard; requestedPools is a request only",
    )
    def put(self, request):
        card = request.data
        try:
            validate("agent-card", card)
        except A2AValidationError as exc:
            return Response(error_body("VALIDATION_ERROR", str(exc), path=exc.path), status=400)
        partner = self.partner
        if card["agentId"] != partner.agent_id:
            raise service.Forbidden(f"agentId must be your agentId ({partner.agent_id!r}).")
        partner.advertised_card = card
        partner.save(update_fields=["advertised_card", "updated_at"])
        granted = sorted(partner.accessible_pools.values_list("name", flat=True))
        return Response(
            {
                "card": card,
                "grantedPools": granted,
                "note": "requestedPools is shown to the operators as a request; only "
                "they grant pools (§18.1).",
            }
        )


@extend_schema(exclude=True)
class UnknownEndpoint(PartnerView):
    """Any other path under /a2a/: a partner's client gets the A2A error shape (after the same
    authentication, and audited like every call), never an HTML page."""

    def unknown(self, request, *args, **kwargs):
        raise exceptions.NotFound(
            f"There is no A2A endpoint {request.method} {request.path}: the API is described "
            "at /api/docs/ (OpenAPI at /api/schema/)."
        )

    get = post = put = patch = delete = unknown
