from celery import shared_task
from django.core.cache import cache
from django.utils import timezone

from mcplet_host import gateway
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
