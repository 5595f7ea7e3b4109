"""The gateway: the one enforcement point every MCPlet call passes (docs/design.md, "One tool
call, end to end"). Checks run in order — routable, surface, pool grants, arguments, pool
policy (`checks`) — each refusal an MCPlet error envelope (§9.1) and an audit event; a call a
person must decide on is held (`held`); the rest goes to `tools/call` (`execute`).

Every call comes with the `Authority` it acts under (mcplet_host.authority): its effective
grants are the calling agent's pools ∩ the pools of every external principal in it, and every
audit event names who acts, for whom and through whom."""

from dataclasses import dataclass

from django.db.models import Q

from held.kinds import step_up, tool_call
from held.models import Asker, Ceremony
from mcplet_host import audit, metrics, storable, tracing
from mcplet_host.authority import HOST
from mcplet_host.gateway.checks import SURFACES, Refusal, check
from mcplet_host.gateway.envelopes import error_envelope
from mcplet_host.gateway.execute import execute_with_retries
from mcplets import ErrorCode
from pools.models import Mcplet, Pool

__all__ = ["SURFACES", "Outcome", "call_tool", "tools_for", "visible_to"]

TRACED_OUTCOMES = {"executed": "executed", "refused": "refused", "pending": "held"}


@dataclass
class Outcome:
    """What a call came to: `executed` (the tool ran; its envelope may still carry the tool's
    own error), `refused` (nothing ran), or `pending` (held in `ceremony` for a person)."""

    status: str
    envelope: dict | None = None
    ceremony: Ceremony | None = None
    rule: str = ""  # the check a refused call broke

    @property
    def is_error(self):
        return self.envelope is not None and "error" in self.envelope


def visible_to(agent, authority=HOST):
    """What the agent's LLM may see, as one queryset: accepted ∩ model-visible ∩ granted to the
    agent ∩ granted to every external principal it acts for (pool-less MCPlets: to all).
    The effective pools are read first, so the MCPlets are one filtered statement that a
    search or a count can join as a subquery."""
    pools = set(agent.accessible_pools.values_list("pk", flat=True))
    for principal in authority.external_principals:  # an intersection, principal by principal
        pools &= set(
            Pool.objects.filter(agents__agent_id=principal, agents__enabled=True).values_list(
                "pk", flat=True
            )
        )
    return Mcplet.objects.routable().filter(
        Q(pool__isnull=True) | Q(pool__in=pools), model_visible=True, server__enabled=True
    )


def tools_for(agent, authority=HOST):
    """Every MCPlet the agent's LLM may see (`visible_to`), by name."""
    return list(visible_to(agent, authority).select_related("server").order_by("name"))


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
    offered=None,
):
    """Call one MCPlet for `agent`, acting under `authority` (who the work is for).

    Returns an Outcome. An action (or any tool with `_meta.auth`) is not run: it is held as a
    pending Ceremony; so is every `app`-surface call an LLM proposed (`proposed_by_model`):
    the app surface means a person, or host code, decided. Once decided, `continuation` (a
    Celery task name) is sent `(ceremony id, continuation_ref)`. `offered`: the names a
    model in discovery mode was given (MGP §16); any other name is refused as not found,
    whether or not it exists, so a model learns nothing of the tools it did not find.
    """
    arguments = {} if arguments is None else arguments
    asker = Asker(
        agent.agent_id,
        authority,
        proposed_by_model,
        trace,
        surface,
        continuation,
        continuation_ref,
    )
    attributes = {"gen_ai.tool.name": str(tool), "mcplet.agent": agent.agent_id}
    with tracing.span("call_tool", attributes=attributes) as span:
        outcome = _call_tool(agent, tool, arguments, asker, offered)
        # The gateway's decision: executed, refused (by which rule) or held for a person.
        span.set_attribute("mcplet.gateway.outcome", TRACED_OUTCOMES[outcome.status])
        if outcome.rule:
            span.set_attribute("mcplet.gateway.rule", outcome.rule)
        return outcome


def _call_tool(agent, tool, arguments, asker, offered):
    try:
        if offered is not None and tool not in offered:
            message = f"No tool named {tool!r} is loaded: find one with mgp_tools_discover."
            raise Refusal(ErrorCode.NOT_FOUND, message, "discovery")
        mcplet = check(tool, arguments, agent, asker.authority, asker.surface)
    except Refusal as refusal:
        return _refused(refusal, tool, asker)
    if mcplet.needs_approval or (asker.surface == "app" and asker.proposed_by_model):
        metrics.tool_called(mcplet, "held")
        return Outcome("pending", ceremony=tool_call.hold(mcplet, arguments, asker))
    answer = execute_with_retries(mcplet, arguments, asker, asker.call_details())
    ceremony = step_up.hold_if_asked(mcplet, arguments, answer, asker)
    if ceremony is None:
        return Outcome("executed", answer.envelope)
    metrics.tool_called(mcplet, "held")  # after its server asked for a person's step
    return Outcome("pending", ceremony=ceremony)


def _refused(refusal, tool, asker):
    """A refusal: audited with the rule it broke, answered with nothing sent."""
    hints = {"retryable": refusal.retryable}
    if refusal.retry_after_ms is not None:
        hints["retry_after_ms"] = refusal.retry_after_ms
    found = None
    if refusal.rule not in ("input", "discovery"):
        found = Mcplet.objects.routable().filter(name=tool).select_related("server").first()
    asker.record(
        audit.EventType.TOOL_BLOCKED,
        audit.BLOCKED,
        {**asker.call_details(), **refusal.audit_details()},
        server=found.server.name if found else "",
        tool=str(tool),
    )
    metrics.refused(refusal.rule, found)
    tool_id = storable.printable(str(tool))
    envelope = error_envelope(refusal.code, refusal.message, tool_id, found, **hints)
    return Outcome("refused", envelope, rule=refusal.rule)
