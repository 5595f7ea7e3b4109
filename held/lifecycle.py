"""A held call from a person's decision to its end (docs/design.md, "Held calls"): run it
exactly once — after the gateway's checks again, and only as it was approved — settle it
(executed, failed, outcome unknown), and wake whoever waits (its continuation).

    pending ──approve / step done──▶ approved ──resume──▶ executing ──▶ executed | failed
       │                                                      │          | outcome unknown
       └──reject / expire──▶ rejected | expired ──resume──▶ (its error, nothing sent)

Each kind's own part (`Ceremony.rules`, held/kinds/) comes in where it differs: what a
decision leads to, and what happens just before an approved call is sent."""

from django.db import transaction
from django.utils import timezone

from held.kinds import step_up
from held.models import Ceremony, arguments_hash
from mcplet_host import audit, tracing
from mcplet_host.gateway.checks import Refusal, agents, check
from mcplet_host.gateway.envelopes import OUTCOME_UNKNOWN, error_envelope, failure
from mcplet_host.gateway.execute import Answer, execute
from mcplets import ErrorCode


def resume(ceremony_id):
    """Run (or refuse) a decided call exactly once, then tell its continuation. Safe to call
    any number of times, from any worker: only the first call after the decision acts."""
    if not tracing.ENABLED:
        return _resume(ceremony_id)
    held_by = Ceremony.objects.filter(pk=ceremony_id).values_list("traceparent", flat=True)
    # Linked to the span that held it: the person's wait is a link, not a span.
    with tracing.span("resume_held_call", links_to=list(held_by)):
        return _resume(ceremony_id)


def _resume(ceremony_id):
    with transaction.atomic():
        ceremony = Ceremony.objects.select_for_update().get(pk=ceremony_id)
        if ceremony.status in Ceremony.DECLINED and ceremony.result is None:
            code, message = ceremony.declined
            ceremony.result = error_envelope(code, message, ceremony.tool_name, ceremony.mcplet)
            ceremony.save(update_fields=["result"])
            return _finish(ceremony)
        if ceremony.status != Ceremony.Status.APPROVED:
            return ceremony  # pending, or already handled by an earlier delivery
        # When it started, until it ends: a call executing long past the tool timeout has lost
        # its worker (see `abandon`).
        ceremony.status, ceremony.executed_at = Ceremony.Status.EXECUTING, timezone.now()
        ceremony.save(update_fields=["status", "executed_at"])

    if (settled := ceremony.rules.before_run(ceremony)) is not None:
        return settled
    answer = _run_approved(ceremony)
    envelope = answer.envelope
    if ceremony.mcplet:
        # The server asks for a step or a form (again): a new hold, for the same continuation
        # (whoever waits finds the newest). An approved strict action keeps needing a passkey.
        step_up.hold_if_asked(
            ceremony.mcplet, ceremony.arguments, answer, ceremony.asker, ceremony.enforcement
        )
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
    envelope = error_envelope(
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
    asker = ceremony.asker
    asker.record(
        audit.EventType.TOOL_EXECUTED,
        audit.FAILURE,
        {
            **asker.authority.audit_details(),
            "ceremony": ceremony.token[:8],
            **failure(envelope),
        },
        server=ceremony.server_name,
        tool=ceremony.tool_name,
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


def _run_approved(ceremony):
    asker = ceremony.asker
    details = {
        **asker.authority.audit_details(),
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
        agent = agents().filter(agent_id=ceremony.agent_id).first()
        if agent is None:
            message = f"The agent {ceremony.agent_id} is gone; nothing ran."
            raise Refusal("X_ACCESS_DENIED", message, "agent")
        mcplet = check(
            ceremony.tool_name, ceremony.arguments, agent, asker.authority, ceremony.surface
        )
        if mcplet.pk != ceremony.mcplet_id:  # the name is now another server's tool
            raise Refusal(
                ErrorCode.NOT_FOUND,
                f"The approved {ceremony.tool_name} of the server {ceremony.server_name} is gone "
                f"(the name is now the server {mcplet.server.name}'s); nothing ran.",
                "approval",
            )
        if ceremony.enforcement == Ceremony.Enforcement.STRICT and assertion is None:
            raise Refusal(
                ErrorCode.AUTH_REQUIRED,
                "The approval's passkey assertion is no longer available; approve again.",
                "assertion",
            )
    except Refusal as refusal:
        asker.record(
            audit.EventType.TOOL_BLOCKED,
            audit.BLOCKED,
            {**details, **refusal.audit_details()},
            server=ceremony.server_name,
            tool=ceremony.tool_name,
        )
        envelope = error_envelope(
            refusal.code, refusal.message, ceremony.tool_name, ceremony.mcplet
        )
        return Answer(envelope, {})
    meta = {"idempotencyKey": ceremony.idempotency_key}
    if ceremony.enforcement == Ceremony.Enforcement.STRICT:
        meta["mcplet_auth"] = assertion  # params._meta only: never arguments, logs or database
    # An input_required round's retry: this call's answers and requestState, never another's.
    return execute(
        mcplet, ceremony.arguments, asker, details, meta=meta, reply=ceremony.input_round
    )


def _finish(ceremony):
    ceremony.notify_continuation()
    return ceremony
