"""The gateway's checks (docs/design.md, "One tool call, end to end", steps 1–5): routable,
surface, grants, arguments, pool policy — each refusal a `Refusal` naming its rule."""

from dataclasses import replace

from django.apps import apps

from mcplet_host import jsonschemas, registry, storable
from mcplets import ErrorCode
from pools.models import Mcplet

SURFACES = ("model", "app")


class Refusal(Exception):
    def __init__(self, code, message, rule, *, retryable=False, retry_after_ms=None):
        super().__init__(message)
        self.code, self.message, self.rule = code, message, rule
        self.retryable, self.retry_after_ms = retryable, retry_after_ms

    def audit_details(self):
        """What a TOOL_BLOCKED event says of it: the rule broken, its code and message."""
        return {"rule": self.rule, "code": self.code, "message": self.message}


def _resolve(tool, snapshot):
    mcplet = snapshot.tool(tool)
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


def _holders(agent, authority, snapshot):
    """The calling agent, then the external principals' agents in the authority's order, as the
    database has them now (the caller also disabled if the instance it passed says so);
    refused if one is gone."""
    holders = []
    for agent_id in (agent.agent_id, *authority.external_principals):
        holder = snapshot.holder(agent_id)
        if holder is None:
            message = (
                f"The partner {agent_id} this work acts for is unknown."
                if holders
                else f"The agent {agent_id} is unknown."
            )
            raise Refusal("X_ACCESS_DENIED", message, "agent")
        holders.append(holder)
    holders[0] = replace(holders[0], enabled=holders[0].enabled and agent.enabled)
    return holders


def _check_grants(mcplet, agent, authority, snapshot):
    """The calling agent's grants ∩ those of every external principal it acts for (§3.6,
    §16.1, §16.4: whatever the task's payload says)."""
    for holder in _holders(agent, authority, snapshot):
        if not holder.enabled:
            raise Refusal("X_ACCESS_DENIED", f"The agent {holder.agent_id} is disabled.", "agent")
        if mcplet.pool_id and mcplet.pool_id not in holder.pool_ids:
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
    try:
        problem = jsonschemas.first_error(mcplet.input_schema or {}, arguments)
    except jsonschemas.Unusable as exc:
        message = f"The tool's inputSchema {exc}: nothing was sent."
        raise Refusal(ErrorCode.VALIDATION_ERROR, message, "arguments") from None
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


def check(mcplet_or_name, arguments, agent, authority, surface):
    _check_input(mcplet_or_name, surface, arguments)
    snapshot = registry.current()
    mcplet = _resolve(mcplet_or_name, snapshot)
    _check_surface(mcplet, surface)
    _check_grants(mcplet, agent, authority, snapshot)
    _check_arguments(mcplet, arguments)
    _check_policy(mcplet, arguments)  # last: a refused call must not use up the rate limit
    return mcplet


def agents():
    """Agents by id (a resumed call, a partner), without the gateway importing the agents room."""
    return apps.get_model("agents", "Agent").objects.all()
