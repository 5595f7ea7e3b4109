"""Celery tasks of the agent layer. They take ids, and a redelivered task does no harm: a
delivery finds its run, an advance needs the run's lease, a resume checks the run's state.
Each then delivers the hand-offs its runs sent, in turn (a2a.bus.hand_offs_here)."""

from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from a2a import bus
from a2a.models import A2AMessage
from agents import director, runner
from agents.models import AgentRun
from mcplet_host import tracing
from mcplet_host.celery import enqueue


def _then_hand_offs(work, *args):
    with bus.hand_offs_here() as hand_offs:
        work(*args)
        while hand_offs:
            message_id, signature = hand_offs.popleft()
            with tracing.span("deliver hand-off", attributes={"messaging.message.id": message_id}):
                _deliver(message_id, signature)


@shared_task(name="agents.deliver", acks_late=True, ignore_result=True)
def deliver(message_id, signature):
    """Deliver a local A2A task request — if the host signed it, its sender is a registered
    internal agent, its recipient exists (§16.4) and its parameters fit the recipient's
    inputSchema (§18.4) — and run the recipient on it."""
    _then_hand_offs(_deliver, message_id, signature)


def _deliver(message_id, signature):
    request, reason = bus.authenticate(message_id, signature)
    code = "X_REFUSED"
    if not reason:
        found = request.registry_snapshot.agents({request.sender_id, request.recipient_id})
        sender, recipient = found.get(request.sender_id), found.get(request.recipient_id)
        if not request.external and (sender is None or not sender.on_bus):
            reason = f"the sender {request.sender_id!r} is not a registered internal agent"
        elif not request.external and not sender.enabled:
            reason = f"the sender {request.sender_id!r} is disabled"
        elif recipient is None or not recipient.on_bus:
            reason = f"the recipient {request.recipient_id!r} is not an agent of this host"
        elif not recipient.enabled:
            reason = f"the recipient {request.recipient_id!r} is disabled"
        elif mismatch := recipient.parameters_problem(request.parameters):
            reason, code = f"its parameters do not fit: {': '.join(mismatch)}", "VALIDATION_ERROR"
    if reason:
        bus.refuse(message_id, request, reason, code)
        return
    run = runner.start(request, recipient)  # None: another delivery marked the request first
    if run is not None:
        runner.advance_started(run)
    elif run_id := AgentRun.objects.filter(request=request).values_list("pk", flat=True).first():
        runner.advance(run_id)  # a redelivery: the run goes on if no live worker holds it


@shared_task(name="agents.advance_run", acks_late=True, ignore_result=True)
def advance_run(run_id):
    _then_hand_offs(runner.advance, run_id)


@shared_task(name="agents.resume_run", acks_late=True, ignore_result=True)
def resume_run(ceremony_id, ref):
    """The gateway's continuation: a held call (or result) was decided."""
    _then_hand_offs(runner.resume, ceremony_id, ref)


@shared_task(name="agents.run_director", ignore_result=True)
def run_director(agent_id):
    """Beat's trigger for one Director cycle (never two at once: see director.run_cycle)."""
    director.run_cycle(agent_id)


@shared_task(name="agents.recover", ignore_result=True)
def recover():
    """Beat: agent work whose task was lost (a worker killed mid-run, the broker's data lost)
    is queued again. The tasks are idempotent, so a copy of one still queued does no harm."""
    since = timezone.now() - timedelta(seconds=settings.MCPLET_RECOVERY_GRACE)
    undelivered = A2AMessage.objects.filter(
        type=A2AMessage.Type.TASK_REQUEST, state=A2AMessage.State.QUEUED, created_at__lt=since
    )
    for message_id, signature in undelivered.values_list("message_id", "signature"):
        enqueue(bus.DELIVER_TASK, [str(message_id), signature])
    for run_id in AgentRun.stalled(since).values_list("pk", flat=True):
        enqueue("agents.advance_run", [str(run_id)])
    for run in AgentRun.waiting_on_decided(since):
        run.waiting_for.notify_continuation()
