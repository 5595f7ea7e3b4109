"""A person's re-run of a call whose outcome is unknown (it was sent and no answer came, so it
may have run): a new held call for exactly the same call — the same asker, the same Authority —
linked to the first attempt, approved with a fresh passkey, sending the first attempt's
idempotency key. It wakes nobody: the run it answered has moved on. Never done by the host."""

from django.db import transaction

from held.kinds.tool_call import ToolCall
from held.models import Ceremony
from mcplet_host import audit
from passkey import assertions
from passkey.assertions import Refused
from passkey.models import audit_refusal, check_approver


class Rerun(ToolCall):
    kind = Ceremony.Kind.RERUN


def refusal(ceremony):
    """Why a person may not run `ceremony` again now (a Refused), or None. Only an approved
    call whose outcome is unknown may be, once at a time, and never after a re-run ran."""
    first = ceremony.rerun_of or ceremony
    if not (ceremony.rules.may_run_again and ceremony.status == Ceremony.Status.OUTCOME_UNKNOWN):
        return Refused(
            assertions.NOT_OUTCOME_UNKNOWN,
            f"Only a call whose outcome is unknown can be run again; this one is "
            f"{ceremony.get_status_display()}.",
            409,
        )
    open_ = first.reruns.exclude(status__in=Ceremony.FINAL).first()
    if open_ is not None:
        return Refused(
            assertions.RERUN_OPEN,
            f"A re-run of this call is already {open_.get_status_display()}.",
            409,
        )
    if first.reruns.filter(status=Ceremony.Status.EXECUTED).exists():
        return Refused(assertions.RERUN_OPEN, "A re-run of this call already ran.", 409)
    return None


def run_again(ceremony, user):
    """`user` runs `ceremony` again: returns the new pending ceremony; raises Refused
    (audited)."""
    try:
        check_approver(user)
        with transaction.atomic():
            # The first attempt's row is the lock: two "run again"s cannot both open one.
            first = Ceremony.objects.select_for_update().get(pk=ceremony.rerun_of_id or ceremony.pk)
            ceremony.refresh_from_db()
            if refused := refusal(ceremony):
                raise refused
            rerun = Ceremony.create_held(
                Ceremony.Kind.RERUN,
                ceremony.asker.nobody_waits(),
                rerun_of=first,
                **{field: getattr(ceremony, field) for field in Ceremony.CALL},
            )
            rerun.audit_event(
                "mcplet.approval.rerun_requested",
                audit.PENDING,
                {
                    **rerun.lineage,
                    "after": ceremony.token[:8],
                    "agent": rerun.agent_id,
                    **rerun.authority.audit_details(),
                    "arguments_hash": rerun.arguments_hash,
                },
                by=user,
            )
    except Refused as refused:
        audit_refusal("run-again", refused, ceremony=ceremony, user=user)
        raise
    return rerun


RULES = Rerun()
