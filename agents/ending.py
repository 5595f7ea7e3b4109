"""A run's end (`finish`, or an operator's `cancel`): on PostgreSQL one statement
(mcplet_host.guarded): the run's conditional UPDATE, its task response, the request's
`answered` mark, the audit event and the hand-off's request, where BEGIN … COMMIT took six or
seven round trips. The run's UPDATE comes first and takes its row's lock: an operator's cancel
racing it waits, or is waited for, and the loser changes nothing."""

from django.db import transaction
from django.db.models.constants import OnConflict

from a2a import bus
from a2a.models import A2AMessage
from agents.models import AgentRun
from held.models import Ceremony
from mcplet_host import audit, guarded, metrics, signals


def finished_event(run, status, error):
    """The run's `agent.run.finished` audit event (unsaved)."""
    return audit.event(
        "agent.run.finished",
        actor_type=audit.ActorType.AGENT,
        actor_id=run.agent.agent_id,
        result=audit.SUCCESS if status == AgentRun.Status.SUCCESS else audit.FAILURE,
        trace_id=run.context_id,
        details={
            "run": str(run.pk),
            "status": status,
            "steps": run.steps,
            "tokens": run.total_tokens,
            **run.authority.audit_details(),
            **({"error": error} if error else {}),
        },
    )


LLM_FAILED = "The agent's model could not answer; the host's operators can see why."


def answer(run, status, error):
    """What the run's task response says: its result on a success or a partial end, its
    error on any other. A partner's work is told that the model failed, not the provider's
    own words (they may echo a key or an account): the run's error keeps them for operators."""
    if error and error.get("code") == "X_LLM_ERROR" and run.authority.partner:
        error = {**error, "message": LLM_FAILED}
    return {
        "result": run.result if status != "error" else None,
        "error": error if status != "success" else None,
    }


def hands_off(run, status):
    """The agent the run's result goes to next, if any: as read with the run's agent; its
    delivery checks it against the registry as it is then (one disabled is refused there,
    audited and shown, never dropped in silence)."""
    target = run.agent.hands_off_to
    return target if status == AgentRun.Status.SUCCESS else None


def hand_off_values(run, target):
    """The row of the run's hand-off: its result, the next task of its context, to `target`,
    acting with the run's authority."""
    sender = run.agent.agent_id
    return bus.task_values(
        sender, target.agent_id, run.result, authority=run.authority, context_id=run.context_id
    )


def in_one_statement(run, status, result, error):
    """`finish` in one statement: True, or False if the run had ended already (or is
    no longer this worker's: `AgentRun.ended_where`). None
    where finish takes its general path: not on PostgreSQL, a run with no request to answer,
    or one that left a held call pending (its end rejects it). Only the run's worker ends it
    here: no one else holds a call for the run meanwhile, so the look comes first (an
    operator's cancel ends it in a transaction)."""
    request = run.request
    if request is None or run.left_pending():
        return None
    if not guarded.one_statement(AgentRun):
        return None
    where, exclude = run.ended_where()  # before `ending` lets the lease go
    values = run.ending(status, result=result, error=error)
    response = bus.response_values(request, status, **answer(run, status, error))
    answered = None
    if request.state != A2AMessage.State.REFUSED:
        mark = {"state": A2AMessage.State.ANSWERED}
        answered = guarded.Guard(A2AMessage, {"pk": request.pk}, mark)
    events = [finished_event(run, status, error)]
    target = hands_off(run, status)
    then = guarded.Then(
        A2AMessage,
        response,
        OnConflict.IGNORE,
        answered,
        audit.APPEND,
        audit.in_statement(events),
        also=target and (A2AMessage, hand_off_values(run, target)),
    )
    ending = guarded.Guard(AgentRun, where, values, exclude)
    try:
        outcome = guarded.updated_then(ending, then)
    except guarded.NotKept:
        return None
    if outcome is None:
        run.read_again()
        return False
    signals.saved(run)  # as AgentRun.end: the dashboard's live view hears it
    metrics.run_finished(status)
    audit.appended(events, outcome.called)
    if outcome.also is not None:
        bus.posted(outcome.also, hand_off=True)
    return True


def finish(run, status, *, result=None, error=None):
    """End the run, once: the one task response to its request, the audit event, and the
    hand-off, in one transaction (one commit; what they publish goes out after it). An operator
    may cancel a run while a worker still advances it; whichever ends it first stands, and the
    other end changes nothing (returns False), as does a worker's whose lease ran out and another
    worker took the run up (`AgentRun.ended_where`)."""
    if (ended := in_one_statement(run, status, result, error)) is not None:
        return ended
    return _finish_in_transaction(run, status, result, error)


def _finish_in_transaction(run, status, result, error, leased=True):
    """`finish` as one transaction: the run's row locked by its UPDATE first, then what it
    left pending looked for and rejected. `leased`: by the worker holding the run's lease."""
    with transaction.atomic():
        if not run.end(status, result=result, error=error, leased=leased):
            return False
        metrics.run_finished(status)
        run.reject_pending_calls()
        if run.request is not None:
            bus.respond(run.request, status, **answer(run, status, error))
        audit.record_many([finished_event(run, status, error)])
        if (target := hands_off(run, status)) is not None:
            bus.post_row(hand_off_values(run, target), hand_off=True)
    return True


def cancel(run, reason="Cancelled by an operator.", by=None):
    """Cancel a run that has not finished; a held call it waits for is rejected (by the
    operator `by`, who the audit names)."""
    if run.is_final:
        return False
    # A worker may be holding a call for the run right now, after this copy of it was read:
    # its end looks for pending calls whatever the copy says.
    run.may_have_held = True
    # One transaction: the rejected call's continuation runs after the run has ended, so it
    # finds nothing left to do (it would otherwise end the run first, as a rejection). Its end
    # locks the run's row before it looks for pending calls: a worker may hold one meanwhile.
    with transaction.atomic():
        if run.waiting_for is not None and not run.waiting_for.is_final:
            run.waiting_for.decline(Ceremony.Status.REJECTED, by)
        error = {"message": reason, "code": "X_CANCELLED"}
        return _finish_in_transaction(run, AgentRun.Status.CANCELLED, None, error, leased=False)
