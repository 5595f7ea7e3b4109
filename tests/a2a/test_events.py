"""A partner task's announcements (a2a.events) on the real Redis: an audited change of a trace
reaches the streams listening to it, through the process's publishing thread; a host on another
database of the same Redis server is not heard."""

import time
import uuid

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.test import override_settings
from redis.connection import parse_url

from a2a import events
from mcplet_host.models import AuditEvent

pytestmark = pytest.mark.services


def other_database():
    """This host's Redis server, another database of it."""
    db = parse_url(settings.REDIS_URL).get("db", 0)
    return settings.REDIS_URL.rsplit("/", 1)[0] + f"/{(db + 1) % 16}"


async def heard(listener, seconds):
    """Whether the listener hears its trace within `seconds` (the subscription's confirmation,
    which `changed` reads as nothing heard, does not end the wait)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if await listener.changed(left):
            return True
    return False


def announced(trace):
    """As the audit's commit hook announces an event of the trace."""
    events.announce(AuditEvent, [AuditEvent(trace_id=trace)])


def test_an_announced_trace_is_heard_by_its_listeners_only():
    trace, elsewhere = str(uuid.uuid4()), str(uuid.uuid4())

    async def listen():
        async with events.Listener(trace) as listener:
            announced(elsewhere)
            assert not await heard(listener, 0.5)
            announced(trace)
            assert await heard(listener, 5)

    async_to_sync(listen)()


def test_a_host_on_another_database_of_the_same_redis_is_not_heard():
    """Redis's channels are server-wide: the same trace announced by a host on another database
    (its REDIS_URL) goes where this host's streams do not listen."""
    trace = str(uuid.uuid4())

    async def listen():
        async with events.Listener(trace) as listener:
            with override_settings(REDIS_URL=other_database()):
                announced(trace)
            assert not await heard(listener, 1)
            announced(trace)  # this host's own, sent after theirs: heard
            assert await heard(listener, 5)

    async_to_sync(listen)()
