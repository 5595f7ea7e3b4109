"""The gateway's envelopes (spec §9.1): a tool's answer, or an error the agent can read, with
the recovery hints a server sent (MGP §14.5) and the steps a person must take (PWMA -32042)."""

import json
from urllib.parse import urlsplit

from django.conf import settings

from mcplet_host import jsonschemas, storable
from mcplet_host.gateway.checks import SURFACES
from mcplets import ErrorCode, error, ok, recovery_hints
from pools.models import site_of


def _visibility(mcplet):
    return [v for v in SURFACES if v in mcplet.visibility]


def error_envelope(code, message, tool, mcplet=None, **hints):
    if mcplet is None:
        return dict(error(code, message, tool_id=tool, mcplet_type=None, **hints))
    return dict(
        error(
            code,
            message,
            tool_id=mcplet.name,
            mcplet_type=mcplet.mcplet_type,
            visibility=_visibility(mcplet),
            **hints,
        )
    )


def _size(result):
    """The characters of a result's content: its text, or its structured content's JSON."""
    text = sum(len(getattr(c, "text", None) or "") for c in result.content)
    if result.structured_content is None:
        return text
    return max(text, len(json.dumps(result.structured_content, default=str)))


def _payload(result):
    """The tool's own envelope or value from a CallToolResult: (is_envelope, body). Without
    structuredContent (a revision before it, a text-only MCPlet) the envelope is its text."""
    body = result.structured_content
    if body is None:
        text = "".join(getattr(c, "text", "") for c in result.content)
        try:
            body = json.loads(text)
        except ValueError:
            return False, text
    envelope = isinstance(body, dict) and "_meta" in body and ("result" in body or "error" in body)
    return envelope, body


def server_hints(error):
    """The MGP §14.5 recovery fields a server sent with its error, kept for the agent (those
    the host cannot store are dropped)."""
    hints = recovery_hints(error)
    if storable.problem(hints.get("details")):
        del hints["details"]
    return hints


# PWMA over MCP §3.6: a wallet's JSON-RPC errors, each a code the agent can tell apart, and
# whether trying again later can help (an upstream failure may pass; a locked vault can be
# unlocked by its holder; a denial or a malformed request stays what it is).
URL_ELICITATION_REQUIRED = -32042  # MCP's URL mode and PWMA-ERR-ELICIT share it
PWMA_ERRORS = {
    -32040: ("X_PWMA_POLICY_DENIED", "the wallet's policy denied the request", False, "security"),
    -32041: ("X_PWMA_BAD_REQUEST", "the wallet cannot read this request", False, "validation"),
    URL_ELICITATION_REQUIRED: (
        "X_PWMA_INTERACTION_REQUIRED",
        "a person must act first",
        False,
        "security",
    ),
    -32043: ("X_PWMA_UPSTREAM_ERROR", "an issuer or verifier failed", True, "external"),
    -32044: ("X_PWMA_VAULT_LOCKED", "the wallet's vault is locked", True, "security"),
}
# MGP §14.3's standard codes, as the §9.1 code an agent acts on: (code, MGP's name, whether
# trying again later may help); their category is their thousand (§14.2). The server's own
# `data._mgp` hints win.
MGP_CATEGORIES = {1: "security", 2: "lifecycle", 3: "resource", 4: "validation", 5: "external"}
_ACCESS, _GONE, _BUSY = "X_ACCESS_DENIED", ErrorCode.NOT_FOUND, ErrorCode.SERVICE_UNAVAILABLE
MGP_ERRORS = {
    1000: (_ACCESS, "PERMISSION_DENIED", False),
    1001: (_ACCESS, "ACCESS_DENIED", False),
    1002: (ErrorCode.AUTH_REQUIRED, "AUTH_REQUIRED", False),
    1003: (ErrorCode.AUTH_FAILED, "AUTH_EXPIRED", False),
    1010: (_ACCESS, "VALIDATION_BLOCKED", False),
    1011: (_ACCESS, "CODE_SAFETY_VIOLATION", False),
    2000: (_BUSY, "SERVER_NOT_READY", True),
    2001: (_BUSY, "SERVER_DRAINING", True),
    2002: (_BUSY, "SERVER_RESTARTING", True),
    3000: (ErrorCode.RATE_LIMITED, "RATE_LIMITED", True),
    3001: (_BUSY, "RESOURCE_EXHAUSTED", True),
    3002: (ErrorCode.RATE_LIMITED, "QUOTA_EXCEEDED", False),
    3003: (_BUSY, "TIMEOUT", True),
    4000: (ErrorCode.VALIDATION_ERROR, "INVALID_TOOL_ARGS", False),
    4001: (_GONE, "TOOL_NOT_FOUND", False),
    4002: (_BUSY, "TOOL_DISABLED", False),
    5000: (_BUSY, "UPSTREAM_ERROR", True),
    5001: (_BUSY, "UPSTREAM_TIMEOUT", True),
    5002: (_BUSY, "UPSTREAM_UNAVAILABLE", True),
}
# The host's own codes a tools/call's envelope may carry, besides §9.1's (docs/metrics.md).
OUTCOME_UNKNOWN = "X_OUTCOME_UNKNOWN"  # sent, and no answer: it may have run
INVALID_RESULT = "X_INVALID_RESULT"  # it ran; its result breaks its schema
RESULT_TOO_LARGE = "X_RESULT_TOO_LARGE"  # it ran; its result is past MCPLET_MAX_RESULT
INPUT_REQUIRED = "X_INPUT_REQUIRED"  # a person's step or answer first (held)
INPUT_UNSUPPORTED = "X_INPUT_UNSUPPORTED"  # asked for what no person here can give
HOST_CODES = frozenset(
    {
        OUTCOME_UNKNOWN,
        INVALID_RESULT,
        RESULT_TOO_LARGE,
        INPUT_REQUIRED,
        INPUT_UNSUPPORTED,
        "X_ACCESS_DENIED",
        "X_DOMAIN_NOT_ALLOWED",
        *(code for code, *_ in PWMA_ERRORS.values()),
    }
)


def jsonrpc_error(mcplet, exc, told):
    """A JSON-RPC error the server answered: a PWMA or MGP code by its meaning, any other as
    unknown; the hints the server `told` (its `data._mgp`) win over the host's defaults."""
    hints = told
    if exc.code in MGP_ERRORS:
        code, name, retryable = MGP_ERRORS[exc.code]
        hints = {"retryable": retryable, "category": MGP_CATEGORIES[exc.code // 1000], **told}
        message = f"{exc.message} (MGP {exc.code}: {name})"
    elif exc.code in PWMA_ERRORS:
        code, meaning, retryable, category = PWMA_ERRORS[exc.code]
        hints = {"retryable": retryable, "category": category, **told}
        if exc.code == URL_ELICITATION_REQUIRED:
            hints["details"] = {"elicitations": _elicitations(exc.data)}
        message = f"{exc.message} (PWMA {exc.code}: {meaning})"
    else:
        code = ErrorCode.UNKNOWN_ERROR
        message = f"The server answered with an error: {exc.message} ({exc.code})."
    return error_envelope(code, message, mcplet.name, mcplet, **hints)


MAX_ELICITATIONS = 8
MAX_ELICITATION_CHARS = 4096
URL_STEP = {"mode", "message", "url", "elicitation_id"}


def _elicitations(data):
    """The steps a -32042 asks a person to take, kept whole and uninterpreted: the MCP URL
    mode (the SDK's ElicitRequestURLParams) and PWMA's QR mode (§3.4, an opaque payload).
    What is malformed or cannot be stored is left out."""
    raw = data.get("elicitations") if isinstance(data, dict) else None
    found = (url_step(item) for item in (raw if isinstance(raw, list) else [])[:MAX_ELICITATIONS])
    return [step for step in found if step is not None]


def url_step(item):
    """One step a person takes in the browser (a URL, or PWMA's QR payload) as the pages show
    it, with the domain the browser will read; None if malformed, ambiguous or unstorable."""
    from mcp_types import ElicitRequestURLParams
    from pydantic import ValidationError

    if not isinstance(item, dict) or storable.problem(item):
        return None
    if item.get("mode") == "qr":
        step = {k: item.get(k) for k in ("elicitationId", "mode", "message", "qrPayload")}
    else:
        try:
            params = ElicitRequestURLParams.model_validate(item)
        except ValidationError:
            return None
        # Read as the person's browser will read it; an ambiguous URL is not shown at all.
        site = site_of(params.url)
        if not site or urlsplit(params.url).scheme not in ("http", "https"):
            return None
        step = params.model_dump(by_alias=True, exclude_none=True, include=URL_STEP)
        step["domain"] = site
    if all(isinstance(v, str) and len(v) <= MAX_ELICITATION_CHARS for v in step.values()):
        return step
    return None


def envelope_of(mcplet, result):
    size = _size(result)
    if size > settings.MCPLET_MAX_RESULT:
        message = (
            f"The result is {size} characters, over this host's limit of "
            f"{settings.MCPLET_MAX_RESULT} (MGP §16.1): the tool ran; ask it for less."
        )
        return error_envelope(RESULT_TOO_LARGE, message, mcplet.name, mcplet)
    is_envelope, body = _payload(result)
    if result.is_error or (is_envelope and "error" in body):
        err = body.get("error") if is_envelope and isinstance(body.get("error"), dict) else {}
        code = str(err.get("code", ""))
        if code not in set(ErrorCode) and not code.startswith("X_"):
            code = ErrorCode.UNKNOWN_ERROR
        message = err.get("message") or (body if isinstance(body, str) else json.dumps(body))
        return error_envelope(code, str(message), mcplet.name, mcplet, **server_hints(err))
    value = body["result"] if is_envelope else body
    if mcplet.result_schema is not None:
        try:
            problem = jsonschemas.first_error(mcplet.result_schema, value)
        except jsonschemas.Unusable as exc:
            message = f"Its declared schema ({mcplet.result_schema_uri}) {exc} (§9.2)."
            return error_envelope(INVALID_RESULT, message, mcplet.name, mcplet)
        if problem is not None:
            where = "/".join(str(p) for p in problem.absolute_path) or "(the result)"
            return error_envelope(
                INVALID_RESULT,
                f"The result breaks its declared schema ({mcplet.result_schema_uri}) at "
                f"{where}: {problem.message} (§9.2).",
                mcplet.name,
                mcplet,
            )
    return dict(
        ok(
            value,
            tool_id=mcplet.name,
            mcplet_type=mcplet.mcplet_type,
            visibility=_visibility(mcplet),
        )
    )


def steps(envelope):
    """The steps a person must take before the call can succeed, or []."""
    error = envelope.get("error") or {}
    if error.get("code") != PWMA_ERRORS[URL_ELICITATION_REQUIRED][0]:
        return []
    return (error.get("details") or {}).get("elicitations") or []


def failure(envelope):
    """What the audit keeps of a failed call: its code, and its message for whoever must act."""
    return {"code": envelope["error"]["code"], "message": envelope["error"]["message"][:500]}
