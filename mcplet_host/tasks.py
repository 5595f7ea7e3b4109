from celery import shared_task
from django.core.cache import cache
from django.utils import timezone

from mcplet_host import handoff

HEARTBEAT_KEY = "beat:heartbeat"


@shared_task(name="mcplet_host.heartbeat", ignore_result=True)
def heartbeat(source="beat"):
    """Scheduled by beat from the database; proves beat → broker → worker works."""
    cache.set(f"{HEARTBEAT_KEY}:{source}", timezone.now().isoformat(), None)


@shared_task(name=handoff.TASK)
def call_tool_handed_over(claim, body):
    """A call `manage.py call_tool` handed to the host, run here so that what it leads to (its
    loopback page, a wallet's notification) reaches the long-running host; its outcome goes
    back through the result backend."""
    return handoff.take(claim, body)
