"""The single path to `tools/call` (docs/design.md, "One tool call, end to end", steps 7–9):
the call on the server's long-lived session, its envelope, its audit event — and the retries a
server's own hints allow."""

import hashlib
import itertools
import json
import secrets
import time
import uuid
from typing import NamedTuple

from django.conf import settings

from held.kinds.form import FormAsker
from mcplet_host import audit, metrics, tracing
from mcplet_host.gateway import rounds
from mcplet_host.gateway.envelopes import (
    INVALID_RESULT,
    OUTCOME_UNKNOWN,
    RESULT_TOO_LARGE,
    envelope_of,
    error_envelope,
    failure,
    jsonrpc_error,
    server_hints,
)
from mcplets import ErrorCode
from mcplets.envelope import RECOVERY_FIELDS
from pools.mcp_client import (
    InvalidResult,
    OutcomeUnknown,
    ResultTooLarge,
    ServerConfig,
    ServerUnreachable,
)
from pools.models import Mcplet
from pools.sessions import sessions


class Answer(NamedTuple):
    """What one tools/call came to: its envelope, the MGP recovery hints the server itself
    sent with its error, and what it asks of a person first (2026-07-28 `input_required`)."""

    envelope: dict
    told: dict
    asked: rounds.InputRequired | None = None


def trace_context(trace):
    """`_meta.traceparent` (W3C Trace Context, as MCP 2026-07-28 carries it): the current span's
    when the host traces (docs/tracing.md); else the call's trace is the host's trace id — a
    workflow's context id is a UUID, whose 32 hex digits it is."""
    if parent := tracing.traceparent():
        return {"traceparent": parent}
    try:
        trace_id = uuid.UUID(trace).hex
    except (ValueError, TypeError, AttributeError):
        trace_id = hashlib.sha256(str(trace).encode()).hexdigest()[:32] if trace else ""
    if not trace_id.strip("0"):
        trace_id = secrets.token_hex(16)
    return {"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}


def execute(mcplet, arguments, asker, details, meta=None, reply=None):
    """Steps 7–9: tools/call with a timeout, the result envelope, the audit event. A held call
    (`meta` carries its idempotency key) whose request left but got no answer is outcome-unknown:
    not retryable, and the host never sends it again. The server's form requests during the
    call go to a person (FormAsker) on behalf of `asker` (held.models.Asker), who acts. `reply`
    is what the retry of an `input_required` round carries (its answers and `requestState`).

    Returns an Answer."""
    actor, trace = asker.actor(), asker.trace_id
    started = time.monotonic()
    told, asked = {}, None
    if not mcplet.server.enabled:
        envelope = error_envelope(
            ErrorCode.SERVICE_UNAVAILABLE,
            f"The server {mcplet.server.name} is disabled.",
            mcplet.name,
            mcplet,
            retryable=False,
        )
    else:
        with tracing.span(
            f"tools/call {mcplet.name}", kind="client", attributes=_call_attributes(mcplet)
        ) as span:
            envelope, told, asked = _call(mcplet, arguments, asker, meta, reply, trace)
            if tracing.ENABLED and (session_id := sessions.session_id(mcplet.server.pk)):
                span.set_attribute("mcp.session.id", session_id)
            if "error" in envelope:
                span.fail(envelope["error"].get("code", "error"))
            if tracing.content_recorded():
                span.set_attribute("gen_ai.tool.call.arguments", json.dumps(arguments, default=str))
                span.set_attribute("gen_ai.tool.call.result", json.dumps(envelope, default=str))
    failed = "error" in envelope
    if mcplet.server.enabled:  # a tools/call was sent
        code = envelope["error"].get("code", "") if failed else ""
        metrics.mcp_call(mcplet, time.monotonic() - started, str(code))
    metrics.tool_called(mcplet, "error" if failed else "success")
    audit.record(
        audit.EventType.TOOL_EXECUTED,
        **actor,
        target_server=mcplet.server.name,
        target_tool=mcplet.name,
        result=audit.FAILURE if failed else audit.SUCCESS,
        trace_id=trace,
        details={
            **details,
            "mcpletType": mcplet.mcplet_type,
            "pool": mcplet.pool_name,
            "duration_ms": round((time.monotonic() - started) * 1000, 1),
            **(failure(envelope) if failed else {}),
        },
    )
    return Answer(envelope, told, asked)


def _call_attributes(mcplet):
    """The OpenTelemetry MCP semantic conventions' attributes of a client's tools/call."""
    return {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": mcplet.name,
        "mcplet.server": mcplet.server.name,
    }


def _call(mcplet, arguments, asker, meta, reply, trace):
    """The tools/call itself: (envelope, the server's hints, what it asks of a person)."""
    from mcp.shared.exceptions import MCPError  # the MCP SDK loads at the first call

    told, asked = {}, None
    try:
        result = sessions.call_tool(
            ServerConfig.of(mcplet.server),
            mcplet.name,
            arguments,
            meta={**(meta or {}), **trace_context(trace)},
            timeout=settings.MCPLET_TOOL_TIMEOUT,
            asker=FormAsker(mcplet, arguments, asker),
            reply=reply,
        )
    except OutcomeUnknown as exc:
        held = meta is not None
        envelope = error_envelope(
            OUTCOME_UNKNOWN,
            f"{exc}: the request was sent to the MCP server at {mcplet.server.endpoint} and no "
            "answer came, so it may have run. "
            + (
                "The host will not send it again: check before running it again (a re-run "
                "reuses this call's idempotency key)."
                if held
                else "Check before calling it again."
            ),
            mcplet.name,
            mcplet,
            # Only a read is safe to try again (§5: side-effect free, idempotent).
            retryable=not held and mcplet.mcplet_type == Mcplet.Type.READ,
        )
    except InvalidResult as exc:
        envelope = error_envelope(INVALID_RESULT, f"{exc}: the tool ran", mcplet.name, mcplet)
    except ResultTooLarge as exc:
        message = f"{exc}: the tool ran; ask it for less"
        envelope = error_envelope(RESULT_TOO_LARGE, message, mcplet.name, mcplet)
    except ServerUnreachable as exc:
        where = mcplet.server.endpoint  # HTTP failures already name their URL
        envelope = error_envelope(
            ErrorCode.SERVICE_UNAVAILABLE,
            str(exc) if where in str(exc) else f"{exc} (the MCP server at {where})",
            mcplet.name,
            mcplet,
            retryable=True,
            retry_after_ms=5000,
        )
    except MCPError as exc:
        told = server_hints(exc.data) if isinstance(exc.data, dict) else {}
        envelope = jsonrpc_error(mcplet, exc, told)
    else:
        if getattr(result, "result_type", "") == "input_required":
            envelope, asked = rounds.read(mcplet, result)
        else:
            envelope = envelope_of(mcplet, result)
        told = {k: v for k, v in envelope.get("error", {}).items() if k in RECOVERY_FIELDS}
    return envelope, told, asked


def _retry_wait(mcplet, told, attempt):
    """Milliseconds to wait before trying a failed call again, or None (MGP §14.6): only a
    read or a prepare the server itself marked retryable — never an action — at most
    MCPLET_TOOL_RETRIES times (fewer if it says so), and only while the wait it asks for
    stays under MCPLET_TOOL_RETRY_MAX_WAIT_MS (the worker sleeps through it)."""
    if mcplet.mcplet_type == Mcplet.Type.ACTION or told.get("retryable") is not True:
        return None
    limit = settings.MCPLET_TOOL_RETRIES
    if attempt > min(told.get("max_retries", limit), limit):
        return None
    wait = told.get("retry_after_ms", 0)
    if told.get("retry_strategy") == "exponential_backoff":
        wait = max(wait, 100) * 2 ** (attempt - 1)
    return wait if wait <= settings.MCPLET_TOOL_RETRY_MAX_WAIT_MS else None


def execute_with_retries(mcplet, arguments, asker, details):
    """`execute`, tried again as the server's hints allow, each retry audited; its Answer."""
    for attempt in itertools.count(1):
        answer = execute(mcplet, arguments, asker, details)
        envelope = answer.envelope
        wait = _retry_wait(mcplet, answer.told, attempt) if "error" in envelope else None
        if wait is None:
            return answer
        actor, trace = asker.actor(), asker.trace_id
        audit.record(
            "mcplet.tool.retried",
            **actor,
            target_server=mcplet.server.name,
            target_tool=mcplet.name,
            result=audit.PENDING,
            trace_id=trace,
            details={**details, "attempt": attempt + 1, "wait_ms": wait, **failure(envelope)},
        )
        time.sleep(wait / 1000)
