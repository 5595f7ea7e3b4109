"""An agent's whole result (e.g. a plan, its proposed actions included — none run yet) shown to
a person before anything it proposes is dispatched or handed off (`result_needs_approval`).
No tool runs on its decision: it is settled at once and its run woken."""

from dataclasses import replace

from django.db import transaction
from django.utils import timezone

from held.kinds.base import HeldKind
from held.models import Ceremony
from mcplet_host import audit


class Result(HeldKind):
    kind = Ceremony.Kind.RESULT
    runs_on_decision = False
    decides_alone = False  # its approval also writes its result

    def after_decision(self, ceremony):
        if ceremony.status == Ceremony.Status.APPROVED:
            ceremony.status, ceremony.executed_at = Ceremony.Status.EXECUTED, timezone.now()
            ceremony.result = {"approved": True, "approvedAt": ceremony.decided_at.isoformat()}
        else:
            ceremony.result = ceremony.decline_error()
        ceremony.save(update_fields=["status", "executed_at", "result"])
        ceremony.notify_continuation()

    next_step = "Confirm or reject it"

    def describe(self, ceremony):
        return f"a confirmation of {ceremony.agent_id}'s result, before it is handed on"

    def outcome(self, ceremony):
        if ceremony.status == Ceremony.Status.EXECUTED:
            return "approved"  # handed on, not executed
        return super().outcome(ceremony)


def hold(asker, result, prompt_message):
    """Hold the result of `asker`'s agent for a person's confirmation (host-only: no tool
    runs); audited as requested. A result is what the agent's model wrote, for a person."""
    asker = replace(asker, proposed_by_model=True, surface="app")
    with transaction.atomic():
        ceremony = Ceremony.create_held(
            Ceremony.Kind.RESULT,
            asker,
            tool_name=f"approve result of {asker.agent_id}",
            arguments=result,
            prompt_message=prompt_message,
            enforcement=Ceremony.Enforcement.HOST_ONLY,
        )
        asker.record(
            "mcplet.approval.requested",
            audit.PENDING,
            {
                "ceremony": ceremony.token[:8],
                "kind": "result",
                **asker.authority.audit_details(),
            },
            tool=ceremony.tool_name,
        )
    return ceremony


RULES = Result()
