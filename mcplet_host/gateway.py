"""The gateway: the one enforcement point every MCPlet call passes (docs/design.md, "One tool
call, end to end"). Checks run in order — routable, surface, pool grants, pool policy, arguments,
approval — each refusal an MCPlet error envelope (§9.1) and an audit event.

Every call comes with the `Authority` it acts under (mcplet_host.authority): its effective
grants are the calling agent's pools ∩ the pools of every external principal in it, and every
audit event names who acts, for whom and through whom."""

import itertools
import json
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.apps import apps
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for

from mcplet_host import audit, storable
from mcplet_host.authority import HOST
from mcplets import ErrorCode, error, ok, recovery_hints
from mcplets.envelope import RECOVERY_FIELDS
from passkey.forms import schema_problem
from passkey.models import Ceremony, arguments_hash
from pools.mcp_client import OutcomeUnknown, ServerConfig, ServerUnreachable
from pools.models import Mcplet
from pools.models import _read_url as read_url
from pools.sessions import sessions

SURFACES = ("model", "app")
OUTCOME_UNKNOWN = "X_OUTCOME_UNKNOWN"


@dataclass
class Outcome:
    """What a call came to: `executed` (the tool ran; its envelope may still carry the tool's
    own error), `refused` (nothing ran), or `pending` (held in `ceremony` for approval)."""

    status: str
    envelope: dict | None = None
    ceremony: Ceremony | None = None

    @property
    def is_error(self):
        return self.envelope is not None and "error" in self.envelope


class Refusal(Exception):
    def __init__(self, code, message, rule, *, retryable=False, retry_after_ms=None):
        super().__init__(message)
        self.code, self.message, self.rule = code, message, rule
        self.retryable, self.retry_after_ms = retryable, retry_after_ms


# --- the LLM's tool list ----------------------------------------------------------------------


def _granted(agent):
    return agent.accessible_pools.through.objects.filter(agent_id=agent.pk).values("pool_id")


def tools_for(agent, authority=HOST):
    """What the agent's LLM sees: accepted ∩ model-visible ∩ granted to the agent ∩ granted to
    every external principal it acts for.
    One query, a UNION of the pool-less and the granted branch so each uses the
    (status, model_visible, pool) index: MCPlets in pools the agent does not hold are not read.
    Sorted here, not in SQL: an ORDER BY name lures SQLite into scanning the name index."""
    visible = Mcplet.objects.routable().filter(model_visible=True, server__enabled=True).order_by()
    # A join from the grant table, not `pool IN (subquery)`: SQLite's planner scans every
    # MCPlet for the latter, and walks the agent's grants to the pool index for the former.
    granted = visible.filter(pool__agents=agent)
    for principal in authority.external_principals:  # one join per principal: an intersection
        granted = granted.filter(pool__agents__agent_id=principal, pool__agents__enabled=True)
    return sorted(visible.filter(pool__isnull=True).union(granted), key=lambda t: t.name)


# --- checks -----------------------------------------------------------------------------------


def _resolve(tool):
    mcplet = Mcplet.objects.routable().select_related("server", "pool").filter(name=tool).first()
    if mcplet is None:
        known = Mcplet.objects.select_related("pool").filter(name=tool).first()
        detail = f" ({known.unroutable_reason})" if known else ""
        raise Refusal(
            ErrorCode.NOT_FOUND, f"No MCPlet named {tool!r} is available{detail}.", "routable"
        )
    return mcplet


def _check_surface(mcplet, surface):
    if surface not in SURFACES:
        raise Refusal(ErrorCode.VALIDATION_ERROR, f"Unknown surface {surface!r}.", "surface")
    if surface not in mcplet.visibility:
        raise Refusal(
            "X_ACCESS_DENIED",
            f"{mcplet.name} cannot be called from the {surface} surface: its visibility is "
            f"{mcplet.visibility} (§8.2).",
            "surface",
        )


def _principals(authority):
    """The external principals' agents, in the authority's order; refused if one is gone."""
    found = {a.agent_id: a for a in _agents().filter(agent_id__in=authority.external_principals)}
    for agent_id in authority.external_principals:
        if agent_id not in found:
            raise Refusal(
                "X_ACCESS_DENIED", f"The partner {agent_id} this work acts for is unknown.", "agent"
            )
    return [found[agent_id] for agent_id in authority.external_principals]


def _check_grants(mcplet, agent, authority):
    """The calling agent's grants ∩ those of every external principal it acts for (§3.6,
    §16.1, §16.4: whatever the task's payload says)."""
    for holder in (agent, *_principals(authority)):
        if not holder.enabled:
            raise Refusal("X_ACCESS_DENIED", f"The agent {holder.agent_id} is disabled.", "agent")
        if mcplet.pool_id and not _granted(holder).filter(pool_id=mcplet.pool_id).exists():
            raise Refusal(
                "X_ACCESS_DENIED",
                f"{mcplet.name} belongs to the pool {mcplet.pool.name}, which is not granted to "
                f"{holder.agent_id} (§3.4, §16.1).",
                "pool",
            )


def _check_policy(mcplet, arguments):
    pool = mcplet.pool
    if pool is None:
        return
    wait_ms = pool.take_call()
    if wait_ms is not None:
        raise Refusal(
            ErrorCode.RATE_LIMITED,
            f"The pool {pool.name} allows {pool.rate_limit_per_minute} calls per minute.",
            "rate_limit",
            retryable=True,
            retry_after_ms=wait_ms,
        )
    blocked = pool.disallowed_urls(arguments)
    if blocked:
        refused = "; ".join(f"{url!r} {why}" for url, why in blocked)
        raise Refusal(
            "X_DOMAIN_NOT_ALLOWED",
            f"The pool {pool.name}'s domain allowlist ({', '.join(pool.domain_allowlist)}) "
            f"refuses {refused}.",
            "domain_allowlist",
        )


def _check_arguments(mcplet, arguments):
    if not isinstance(arguments, dict):
        raise Refusal(ErrorCode.VALIDATION_ERROR, "Arguments must be a JSON object.", "arguments")
    schema = mcplet.input_schema or {}
    problem = best_match(validator_for(schema, Draft202012Validator)(schema).iter_errors(arguments))
    if problem is not None:
        where = "/".join(str(p) for p in problem.absolute_path) or "(the arguments)"
        raise Refusal(ErrorCode.VALIDATION_ERROR, f"{where}: {problem.message}", "arguments")


def _check_input(tool, surface, arguments):
    """Text no query, row or tool call can carry (NUL, lone surrogates, infinite numbers,
    nesting past storable.MAX_DEPTH) is refused before any of them."""
    for what, value in (("tool name", tool), ("surface", surface)):
        if not isinstance(value, str) or storable.text_problem(value):
            raise Refusal(
                ErrorCode.VALIDATION_ERROR, f"The {what} {value!r} is not a usable name.", "input"
            )
    unusable = storable.problem(arguments)
    if unusable:
        path, why = unusable
        raise Refusal(
            ErrorCode.VALIDATION_ERROR,
            f"The arguments at {path or '(the arguments)'}: {why}.",
            "input",
        )


def _check(mcplet_or_name, arguments, agent, authority, surface):
    _check_input(mcplet_or_name, surface, arguments)
    mcplet = _resolve(mcplet_or_name)
    _check_surface(mcplet, surface)
    _check_grants(mcplet, agent, authority)
    _check_arguments(mcplet, arguments)
    _check_policy(mcplet, arguments)  # last: a refused call must not use up the rate limit
    return mcplet


# --- envelopes --------------------------------------------------------------------------------


def _visibility(mcplet):
    return [v for v in SURFACES if v in mcplet.visibility]


def _error(code, message, tool, mcplet=None, **hints):
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


def _payload(result):
    """The tool's own envelope or value from a CallToolResult: (is_envelope, body)."""
    body = result.structured_content
    if isinstance(body, dict) and "_meta" in body and ("result" in body or "error" in body):
        return True, body
    if body is not None:
        return False, body
    text = "".join(getattr(c, "text", "") for c in result.content)
    try:
        return False, json.loads(text)
    except ValueError:
        return False, text


def _hints(error):
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


def _jsonrpc_error(mcplet, exc, told):
    """A JSON-RPC error the server answered: a PWMA code by its name, any other as unknown;
    the hints the server `told` (its `data._mgp`) win over the host's defaults."""
    hints = told
    if exc.code in PWMA_ERRORS:
        code, meaning, retryable, category = PWMA_ERRORS[exc.code]
        hints = {"retryable": retryable, "category": category, **told}
        if exc.code == URL_ELICITATION_REQUIRED:
            hints["details"] = {"elicitations": _elicitations(exc.data)}
        message = f"{exc.message} (PWMA {exc.code}: {meaning})"
    else:
        code = ErrorCode.UNKNOWN_ERROR
        message = f"The server answered with an error: {exc.message} ({exc.code})."
    return _error(code, message, mcplet.name, mcplet, **hints)


MAX_ELICITATIONS = 8
MAX_ELICITATION_CHARS = 4096
URL_STEP = {"mode", "message", "url", "elicitation_id"}


def _elicitations(data):
    """The steps a -32042 asks a person to take, kept whole and uninterpreted: the MCP URL
    mode (the SDK's ElicitRequestURLParams) and PWMA's QR mode (§3.4, an opaque payload).
    What is malformed or cannot be stored is left out."""
    from mcp_types import ElicitRequestURLParams
    from pydantic import ValidationError

    found = []
    raw = data.get("elicitations") if isinstance(data, dict) else None
    for item in (raw if isinstance(raw, list) else [])[:MAX_ELICITATIONS]:
        if not isinstance(item, dict) or storable.problem(item):
            continue
        if item.get("mode") == "qr":
            step = {k: item.get(k) for k in ("elicitationId", "mode", "message", "qrPayload")}
        else:
            try:
                params = ElicitRequestURLParams.model_validate(item)
            except ValidationError:
                continue
            # Read as the person's browser will read it; an ambiguous URL is not shown at all.
            host, ambiguity = read_url(params.url) or ("", "not a web URL")
            if not host or ambiguity or urlsplit(params.url).scheme not in ("http", "https"):
                continue
            step = params.model_dump(by_alias=True, exclude_none=True, include=URL_STEP)
            step["domain"] = host
        if all(isinstance(v, str) and len(v) <= MAX_ELICITATION_CHARS for v in step.values()):
            found.append(step)
    return found


def _envelope_of(mcplet, result):
    is_envelope, body = _payload(result)
    if result.is_error or (is_envelope and "error" in body):
        err = body.get("error") if is_envelope and isinstance(body.get("error"), dict) else {}
        code = str(err.get("code", ""))
        if code not in set(ErrorCode) and not code.startswith("X_"):
            code = ErrorCode.UNKNOWN_ERROR
        message = err.get("message") or (body if isinstance(body, str) else json.dumps(body))
        return _error(code, str(message), mcplet.name, mcplet, **_hints(err))
    value = body["result"] if is_envelope else body
    if mcplet.result_schema is not None:
        schema = mcplet.result_schema
        problem = best_match(validator_for(schema, Draft202012Validator)(schema).iter_errors(value))
        if problem is not None:
            where = "/".join(str(p) for p in problem.absolute_path) or "(the result)"
            return _error(
                "X_INVALID_RESULT",
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


# --- calling ----------------------------------------------------------------------------------


def _actor(agent_id, authority):
    """Who acts (the actor), for whom and through whom (the details)."""
    actor = {"actor_type": audit.ActorType.AGENT, "actor_id": agent_id}
    return actor, authority.audit_details()


class FormAsker:
    """Takes a server's form request (`elicitation/create`, form mode) made during the call
    `mcplet(arguments)` to a person: a form ceremony naming the call in flight (its tool, agent
    and Authority, from `held`), answered on its page within MCPLET_ELICITATION_WAIT seconds,
    or declined. An LLM never answers. Runs in a worker thread while the call waits."""

    def __init__(self, mcplet, arguments, held):
        self.mcplet, self.arguments, self.held = mcplet, arguments, held
        self.wait = settings.MCPLET_ELICITATION_WAIT

    def ask(self, message, schema):
        message = message if isinstance(message, str) else ""
        problem = schema_problem(schema)
        if problem is None and (bad := storable.problem([message, schema])) is not None:
            problem = f"the request cannot be stored ({bad[1]})"
        if problem is not None:
            self.refuse(problem)
            return {"action": "decline"}
        ceremony = Ceremony.open_form(
            mcplet=self.mcplet,
            arguments=self.arguments,
            message=message[:2000],
            schema=schema,
            **self.held,
        )
        self._audit("mcplet.elicitation.requested", audit.PENDING, ceremony=ceremony.token[:8])
        return ceremony.wait_for_answer()

    def refuse(self, reason):
        self._audit("mcplet.elicitation.declined", audit.BLOCKED, reason=reason)

    def _audit(self, event, result, **details):
        authority = self.held["authority"]
        audit.record(
            event,
            actor_type=audit.ActorType.SYSTEM,
            actor_id=f"server:{self.mcplet.server.name}",
            target_server=self.mcplet.server.name,
            target_tool=self.mcplet.name,
            result=result,
            trace_id=self.held["trace_id"],
            details={"agent": self.held["agent_id"], **authority.audit_details(), **details},
        )


def _execute(mcplet, arguments, *, actor, details, trace, meta=None, held=None):
    """Steps 7–9: tools/call with a timeout, the result envelope, the audit event. A held call
    (`meta` carries its idempotency key) whose request left but got no answer is outcome-unknown:
    not retryable, and the host never sends it again. The server's form requests during the
    call go to a person (FormAsker) on behalf of `held` (who asks, as for Ceremony.open).

    Returns (envelope, the MGP recovery hints the server itself sent with its error)."""
    started = time.monotonic()
    told = {}
    if not mcplet.server.enabled:
        envelope = _error(
            ErrorCode.SERVICE_UNAVAILABLE,
            f"The server {mcplet.server.name} is disabled.",
            mcplet.name,
            mcplet,
            retryable=False,
        )
    else:
        from mcp.shared.exceptions import MCPError  # the MCP SDK loads at the first call

        try:
            result = sessions.call_tool(
                ServerConfig.of(mcplet.server),
                mcplet.name,
                arguments,
                meta=meta,
                timeout=settings.MCPLET_TOOL_TIMEOUT,
                asker=FormAsker(mcplet, arguments, held) if held is not None else None,
            )
        except OutcomeUnknown as exc:
            held = meta is not None
            envelope = _error(
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
        except ServerUnreachable as exc:
            where = mcplet.server.endpoint  # HTTP failures already name their URL
            envelope = _error(
                ErrorCode.SERVICE_UNAVAILABLE,
                str(exc) if where in str(exc) else f"{exc} (the MCP server at {where})",
                mcplet.name,
                mcplet,
                retryable=True,
                retry_after_ms=5000,
            )
        except MCPError as exc:
            told = _hints(exc.data) if isinstance(exc.data, dict) else {}
            envelope = _jsonrpc_error(mcplet, exc, told)
        else:
            envelope = _envelope_of(mcplet, result)
            told = {k: v for k, v in envelope.get("error", {}).items() if k in RECOVERY_FIELDS}
    failed = "error" in envelope
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
            **(_failure(envelope) if failed else {}),
        },
    )
    return envelope, told


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


def _execute_with_retries(mcplet, arguments, *, actor, details, trace, held):
    """`_execute`, tried again as the server's hints allow, each retry audited."""
    for attempt in itertools.count(1):
        envelope, told = _execute(
            mcplet, arguments, actor=actor, details=details, trace=trace, held=held
        )
        wait = _retry_wait(mcplet, told, attempt) if "error" in envelope else None
        if wait is None:
            return envelope
        audit.record(
            "mcplet.tool.retried",
            **actor,
            target_server=mcplet.server.name,
            target_tool=mcplet.name,
            result=audit.PENDING,
            trace_id=trace,
            details={**details, "attempt": attempt + 1, "wait_ms": wait, **_failure(envelope)},
        )
        time.sleep(wait / 1000)


def _failure(envelope):
    """What the audit keeps of a failed call: its code, and its message for whoever must act."""
    return {"code": envelope["error"]["code"], "message": envelope["error"]["message"][:500]}


def call_tool(
    agent,
    tool,
    arguments,
    surface="model",
    trace="",
    *,
    authority=HOST,
    proposed_by_model=False,
    continuation="",
    continuation_ref="",
):
    """Call one MCPlet for `agent`, acting under `authority` (who the work is for).

    Returns an Outcome. An action (or any tool with `_meta.auth`) is not run: it is held as a
    pending Ceremony; so is every `app`-surface call an LLM proposed (`proposed_by_model`):
    the app surface means a person, or host code, decided. Once decided, `continuation` (a
    Celery task name) is sent `(ceremony id, continuation_ref)`.
    """
    arguments = {} if arguments is None else arguments
    actor, details = _actor(agent.agent_id, authority)
    details["surface"] = surface
    if proposed_by_model:
        details["proposed_by"] = f"{agent.agent_id}'s model"
    try:
        mcplet = _check(tool, arguments, agent, authority, surface)
    except Refusal as refusal:
        hints = {"retryable": refusal.retryable}
        if refusal.retry_after_ms is not None:
            hints["retry_after_ms"] = refusal.retry_after_ms
        found = None
        if refusal.rule != "input":
            found = Mcplet.objects.routable().filter(name=tool).select_related("server").first()
        audit.record(
            audit.EventType.TOOL_BLOCKED,
            **actor,
            target_server=found.server.name if found else "",
            target_tool=str(tool),
            result=audit.BLOCKED,
            trace_id=trace,
            details={
                **details,
                "rule": refusal.rule,
                "code": refusal.code,
                "message": refusal.message,
            },
        )
        tool_id = storable.printable(str(tool))
        return Outcome("refused", _error(refusal.code, refusal.message, tool_id, found, **hints))

    if mcplet.needs_approval or (surface == "app" and proposed_by_model):
        with transaction.atomic():
            ceremony = Ceremony.open(
                mcplet=mcplet,
                arguments=arguments,
                agent_id=agent.agent_id,
                authority=authority,
                proposed_by_model=proposed_by_model,
                trace_id=trace,
                surface=surface,
                continuation=continuation,
                continuation_ref=continuation_ref,
            )
            audit.record(
                "mcplet.approval.requested",
                **actor,
                target_server=mcplet.server.name,
                target_tool=mcplet.name,
                result=audit.PENDING,
                trace_id=trace,
                details={
                    **details,
                    "ceremony": ceremony.token[:8],
                    "arguments": arguments,
                    "enforcement": ceremony.enforcement,
                    "expires_at": ceremony.expires_at,
                },
            )
        return Outcome("pending", ceremony=ceremony)

    held = _held(
        agent.agent_id, authority, proposed_by_model, trace, surface, continuation, continuation_ref
    )
    envelope = _execute_with_retries(
        mcplet, arguments, actor=actor, details=details, trace=trace, held=held
    )
    steps = _steps(envelope)
    if not steps:
        return Outcome("executed", envelope)
    return Outcome("pending", ceremony=_hold_step_up(mcplet, arguments, envelope, held))


# --- step-ups (MCP URL mode, PWMA -32042) -------------------------------------------------------


def _steps(envelope):
    """The steps a person must take before the call can succeed, or []."""
    error = envelope.get("error") or {}
    if error.get("code") != PWMA_ERRORS[URL_ELICITATION_REQUIRED][0]:
        return []
    return (error.get("details") or {}).get("elicitations") or []


def _hold_step_up(mcplet, arguments, envelope, held, enforcement=Ceremony.Enforcement.HOST_ONLY):
    """Hold the call like an approval (no worker waits) until the step is done; its page shows
    the steps, and the approvers are told as for any held call."""
    with transaction.atomic():
        ceremony = Ceremony.open_step_up(
            mcplet=mcplet,
            arguments=arguments,
            message=envelope["error"]["message"],
            elicitations=_steps(envelope),
            enforcement=enforcement,
            **held,
        )
        actor, details = _actor(held["agent_id"], held["authority"])
        audit.record(
            "mcplet.stepup.held",
            **actor,
            target_server=mcplet.server.name,
            target_tool=mcplet.name,
            result=audit.PENDING,
            trace_id=held["trace_id"],
            details={
                **details,
                "ceremony": ceremony.token[:8],
                "elicitations": [
                    {k: e.get(k) for k in ("elicitationId", "mode", "domain") if k in e}
                    for e in ceremony.elicitations
                ],
                "expires_at": ceremony.expires_at,
            },
        )
    return ceremony


# --- resuming a held call -----------------------------------------------------------------------


def resume(ceremony_id):
    """Run (or refuse) a decided call exactly once, then tell its continuation. Safe to call
    any number of times, from any worker: only the first call after the decision acts."""
    with transaction.atomic():
        ceremony = Ceremony.objects.select_for_update().get(pk=ceremony_id)
        if ceremony.status in Ceremony.DECLINED and ceremony.result is None:
            code, message = ceremony.declined
            ceremony.result = _error(code, message, ceremony.tool_name, ceremony.mcplet)
            ceremony.save(update_fields=["result"])
            return _finish(ceremony)
        if ceremony.status != Ceremony.Status.APPROVED:
            return ceremony  # pending, or already handled by an earlier delivery
        # When it started, until it ends: a call executing long past the tool timeout has lost
        # its worker (see `abandon`).
        ceremony.status, ceremony.executed_at = Ceremony.Status.EXECUTING, timezone.now()
        ceremony.save(update_fields=["status", "executed_at"])

    strict = ceremony.enforcement == Ceremony.Enforcement.STRICT
    if ceremony.kind == Ceremony.Kind.STEP_UP and strict and ceremony.mcplet:
        return _approve_again(ceremony)
    if ceremony.kind == Ceremony.Kind.STEP_UP:
        # The same call, the same arguments (PWMA's requestId with them), sent once more.
        actor, details = _actor(ceremony.agent_id, ceremony.authority)
        audit.record(
            "mcplet.stepup.retried",
            **actor,
            target_server=ceremony.server_name,
            target_tool=ceremony.tool_name,
            result=audit.PENDING,
            trace_id=ceremony.trace_id,
            details={"ceremony": ceremony.token[:8], **details},
        )
    envelope = _run_approved(ceremony)
    if _steps(envelope) and ceremony.mcplet:
        # The server asks for a step (again): a new hold, for the same continuation (whoever
        # waits finds the newest). An approved strict action keeps needing a passkey.
        held = _held_like(ceremony)
        _hold_step_up(ceremony.mcplet, ceremony.arguments, envelope, held, ceremony.enforcement)
    # Executed means it ran and succeeded: a call refused at the re-check, or one that ran and
    # returned an error, failed (the approval stands; the call did not do its work). One sent
    # without an answer may have run: its outcome is unknown, and it stays so.
    code = (envelope.get("error") or {}).get("code")
    if code == OUTCOME_UNKNOWN:
        status = Ceremony.Status.OUTCOME_UNKNOWN
    else:
        status = Ceremony.Status.FAILED if code else Ceremony.Status.EXECUTED
    return _settle(ceremony, status, envelope) or Ceremony.objects.get(pk=ceremony.pk)


def abandon(ceremony_id):
    """Settle a call whose worker died while running it: it may have run, so its outcome is
    unknown, and the host never sends it again (a person checks; the waiting run goes on)."""
    ceremony = Ceremony.objects.get(pk=ceremony_id)
    envelope = _error(
        OUTCOME_UNKNOWN,
        "The worker running this call stopped before its answer was recorded, so it may have "
        "run. The host will not send it again: check before running it again (a re-run reuses "
        "this call's idempotency key).",
        ceremony.tool_name,
        ceremony.mcplet,
        retryable=False,
    )
    if _settle(ceremony, Ceremony.Status.OUTCOME_UNKNOWN, envelope) is None:
        return
    actor, details = _actor(ceremony.agent_id, ceremony.authority)
    audit.record(
        audit.EventType.TOOL_EXECUTED,
        **actor,
        target_server=ceremony.server_name,
        target_tool=ceremony.tool_name,
        result=audit.FAILURE,
        trace_id=ceremony.trace_id,
        details={**details, "ceremony": ceremony.token[:8], **_failure(envelope)},
    )


def _settle(ceremony, status, envelope):
    """Record an executing call's end, once (a late worker and `abandon` may race): None if it
    had already ended. Saved, not updated in place: the ceremony's receivers (the dashboard's
    live approvals, the loopback page) hear of the end."""
    with transaction.atomic():
        executing = Ceremony.objects.select_for_update().filter(
            pk=ceremony.pk, status=Ceremony.Status.EXECUTING
        )
        if not list(executing.values_list("pk", flat=True)):
            return None
        ceremony.status, ceremony.result, ceremony.executed_at = status, envelope, timezone.now()
        ceremony.save(update_fields=["status", "result", "executed_at"])
    return _finish(ceremony)


def _approve_again(ceremony):
    """A strict action's step is done, but its passkey assertion was used once: the same call
    is held for a fresh approval (a new challenge bound to the same call), for the same
    continuation. Nothing is sent until then."""
    with transaction.atomic():
        again = Ceremony.open(
            mcplet=ceremony.mcplet, arguments=ceremony.arguments, **_held_like(ceremony)
        )
        actor, details = _actor(ceremony.agent_id, ceremony.authority)
        audit.record(
            "mcplet.approval.requested",
            **actor,
            target_server=ceremony.server_name,
            target_tool=ceremony.tool_name,
            result=audit.PENDING,
            trace_id=ceremony.trace_id,
            details={
                **details,
                "ceremony": again.token[:8],
                "after_step": ceremony.token[:8],
                "enforcement": again.enforcement,
                "expires_at": again.expires_at,
            },
        )
        ceremony.status, ceremony.executed_at = Ceremony.Status.EXECUTED, timezone.now()
        ceremony.result = {"stepCompleted": True, "approval": again.token[:8]}
        ceremony.save(update_fields=["status", "result", "executed_at"])
    return _finish(ceremony)


def _run_approved(ceremony):
    authority = ceremony.authority
    actor, details = _actor(ceremony.agent_id, authority)
    details |= {
        "surface": ceremony.surface,
        "ceremony": ceremony.token[:8],
        **ceremony.lineage,
        "approved_by": getattr(ceremony.decided_by, "username", ""),
    }
    assertion = ceremony.take_assertion()
    try:
        # The approval is for the call as it was shown: a row edited since runs nothing.
        if arguments_hash(ceremony.tool_name, ceremony.arguments) != ceremony.arguments_hash:
            raise Refusal(
                ErrorCode.AUTH_FAILED,
                "The call was changed after it was approved; nothing ran.",
                "approval",
            )
        # The registry or the grants may have changed while the call waited: check again.
        mcplet = _check(
            ceremony.tool_name,
            ceremony.arguments,
            _agents().get(agent_id=ceremony.agent_id),
            authority,
            ceremony.surface,
        )
        if ceremony.enforcement == Ceremony.Enforcement.STRICT and assertion is None:
            raise Refusal(
                ErrorCode.AUTH_REQUIRED,
                "The approval's passkey assertion is no longer available; approve again.",
                "assertion",
            )
    except Refusal as refusal:
        audit.record(
            audit.EventType.TOOL_BLOCKED,
            **actor,
            target_server=ceremony.server_name,
            target_tool=ceremony.tool_name,
            result=audit.BLOCKED,
            trace_id=ceremony.trace_id,
            details={
                **details,
                "rule": refusal.rule,
                "code": refusal.code,
                "message": refusal.message,
            },
        )
        return _error(refusal.code, refusal.message, ceremony.tool_name, ceremony.mcplet)
    meta = {"idempotencyKey": ceremony.idempotency_key}
    if ceremony.enforcement == Ceremony.Enforcement.STRICT:
        meta["mcplet_auth"] = assertion  # params._meta only: never arguments, logs or database
    envelope, _ = _execute(
        mcplet,
        ceremony.arguments,
        actor=actor,
        details=details,
        trace=ceremony.trace_id,
        meta=meta,
        held=_held_like(ceremony),
    )
    return envelope


def _held(agent_id, authority, proposed_by_model, trace, surface, continuation, ref):
    """What a held call keeps of who asked and who waits (Ceremony.open's keywords)."""
    return {
        "agent_id": agent_id,
        "authority": authority,
        "proposed_by_model": proposed_by_model,
        "trace_id": trace,
        "surface": surface,
        "continuation": continuation,
        "continuation_ref": ref,
    }


def _held_like(ceremony):
    return _held(
        ceremony.agent_id,
        ceremony.authority,
        ceremony.proposed_by_model,
        ceremony.trace_id,
        ceremony.surface,
        ceremony.continuation,
        ceremony.continuation_ref,
    )


def _agents():
    """Agents by id (a resumed call, a partner), without the gateway importing the agents room."""
    return apps.get_model("agents", "Agent").objects.all()


def _finish(ceremony):
    ceremony.notify_continuation()
    return ceremony
