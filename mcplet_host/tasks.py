from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from mcplet_host import gateway, handoff
from passkey.models import Ceremony

HEARTBEAT_KEY = "beat:heartbeat"


@shared_task(name="mcplet_host.heartbeat", ignore_result=True)
def heartbeat(source="beat"):
    """Scheduled by beat from the database; proves beat → broker → worker works."""
    cache.set(f"{HEARTBEAT_KEY}:{source}", timezone.now().isoformat(), None)


@shared_task(name="mcplet_host.resume_call", acks_late=True, ignore_result=True)
def resume_call(ceremony_id):
    """Run a decided call (approved) or resolve it with its error (rejected, expired), once."""
    gateway.resume(ceremony_id)


@shared_task(name=handoff.TASK)
def call_tool_handed_over(claim, body):
    """A call `manage.py call_tool` handed to the host, run here so that what it leads to (its
    loopback page, a wallet's notification) reaches the long-running host; its outcome goes
    back through the result backend."""
    return handoff.take(claim, body)


@shared_task(name="mcplet_host.elicitation_complete", ignore_result=True)
def elicitation_complete(server_id, elicitation_id):
    """A server's notifications/elicitation/complete, heard by some process's session: the
    step-up waiting for it is completed and its call sent again (idempotent)."""
    Ceremony.elicitation_completed(server_id, elicitation_id)


@shared_task(name="mcplet_host.expire_ceremonies", ignore_result=True)
def expire_ceremonies():
    """Beat: pending calls nobody approved in time are resolved as expired, unexecuted."""
    for ceremony in Ceremony.objects.overdue():
        ceremony.decline(Ceremony.Status.EXPIRED)


@shared_task(name="mcplet_host.recover_calls", ignore_result=True)
def recover_calls():
    """Beat: decided calls whose task was lost (a worker killed, the broker's data lost) are
    queued again; one whose worker died while running it is settled as outcome-unknown."""
    now = timezone.now()
    since = now - timedelta(seconds=settings.MCPLET_RECOVERY_GRACE)
    for ceremony_id in Ceremony.objects.stranded(since).values_list("pk", flat=True):
        resume_call.delay(ceremony_id)
    sent_before = since - timedelta(seconds=settings.MCPLET_TOOL_TIMEOUT)
    for ceremony_id in Ceremony.objects.abandoned(sent_before).values_list("pk", flat=True):
        gateway.abandon(ceremony_id)
