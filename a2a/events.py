"""A partner task's changes, announced to the streaming bindings without polling. Every change
of a task is audited under its trace (the contextId), so after each audit commit the traces it
names are published on Redis; a stream subscribes to its task's trace and re-reads the task at
each announcement. The embedded mode (no Redis, one process) re-reads every EMBEDDED_PERIOD."""

import asyncio

from django.conf import settings

from mcplet_host import background
from mcplet_host.config import redis_db

EMBEDDED_PERIOD = 0.5


def channel(trace):
    """The Redis channel of a trace's announcements. Redis's channels are server-wide, not per
    database: the database's number keeps two hosts on one Redis server out of each other's
    announcements (as it keeps them out of each other's dashboards: CHANNEL_LAYERS)."""
    return f"mcplet:a2a:{redis_db(settings.REDIS_URL)}:trace:{trace}"


def announce(sender, events, **kwargs):
    """audit_recorded's receiver (after the commit): queues the publications for the process's
    publishing thread (mcplet_host.background), never raising into the audited work. A trace
    announced again before the thread publishes is published once."""
    if settings.REDIS_URL is None:
        return
    for trace in sorted({event.trace_id for event in events if event.trace_id}):
        background.sends.gather(channel(trace), trace, _changed)


def _changed(traces):
    return b"1"


class Listener:
    """`async with Listener(trace) as listener: await listener.changed(timeout)`."""

    def __init__(self, trace):
        self.trace = trace

    async def __aenter__(self):
        if settings.REDIS_URL is not None:
            import redis.asyncio as aioredis

            self.redis = aioredis.from_url(settings.REDIS_URL)
            self.pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            await self.pubsub.subscribe(channel(self.trace))
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
