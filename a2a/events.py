"""A partner task's changes, announced to the streaming bindings without polling. Every change
of a task is audited under its trace (the contextId), so after each audit commit the traces it
names are published on Redis; a stream subscribes to its task's trace and re-reads the task at
each announcement. The embedded mode (no Redis, one process) re-reads every EMBEDDED_PERIOD."""

import asyncio
import logging

import redis
import redis.asyncio as aioredis
from django.conf import settings

log = logging.getLogger(__name__)

PREFIX = "mcplet:a2a:trace:"
EMBEDDED_PERIOD = 0.5
_publisher = None


def announce(sender, events, **kwargs):
    """audit_recorded's receiver (after the commit): never raises into the audited work."""
    global _publisher
    if settings.REDIS_URL is None:
        return
    traces = {event.trace_id for event in events if event.trace_id}
    try:
        if _publisher is None:
            _publisher = redis.Redis.from_url(settings.REDIS_URL)
        for trace in traces:
            _publisher.publish(PREFIX + trace, "1")
    except redis.RedisError as exc:  # streams still see the change at their next heartbeat
        log.warning("a2a announcement failed: %s: %s", type(exc).__name__, exc)


class Listener:
    """`async with Listener(trace) as listener: await listener.changed(timeout)`."""

    def __init__(self, trace):
        self.channel = PREFIX + trace

    async def __aenter__(self):
        if settings.REDIS_URL is not None:
            self.redis = aioredis.from_url(settings.REDIS_URL)
            self.pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            await self.pubsub.subscribe(self.channel)
        return self

    async def changed(self, timeout):
        """True when the trace was announced within `timeout` seconds."""
        if settings.REDIS_URL is None:
            await asyncio.sleep(EMBEDDED_PERIOD)
            return True
        return await self.pubsub.get_message(timeout=timeout) is not None

    async def __aexit__(self, *exc_info):
        if settings.REDIS_URL is not None:
            await self.pubsub.aclose()
            await self.redis.aclose()
