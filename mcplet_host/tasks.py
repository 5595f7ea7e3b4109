from celery import shared_task
from django.core.cache import cache
from django.utils import timezone

HEARTBEAT_KEY = "beat:heartbeat"


@shared_task(name="mcplet_host.heartbeat", ignore_result=True)
def heartbeat(source="beat"):
    """Scheduled by beat from the database; proves beat → broker → worker works."""
    cache.set(f"{HEARTBEAT_KEY}:{source}", timezone.now().isoformat(), None)
