"""Best-effort publications after a commit (the dashboard's live messages, the A2A streams'
announcements), off the caller's thread: the caller only queues; one daemon thread per process
publishes on Redis with a plain redis-py client.

Publishing in the caller would cost every audited tool call a Redis round trip, and an asyncio
loop for the sends cost more than the sends (redis.asyncio's machinery, a self-pipe wake per
batch: ~0.5 ms of CPU a gateway call). Started lazily and again after a fork (Celery's prefork
children do not inherit threads).

What is queued for one channel gathers (`gather`): what comes while the thread is busy goes in
one message, each channel once, and all channels in one pipeline (one round trip); an idle
thread publishes each at once.

A message is built only for a channel someone listens to (`_Heard`). Most have no one (no
dashboard open, no partner streaming that trace), and building their messages was most of the
thread's work: a channel not heard at its last publication is asked about (PUBSUB NUMSUB) in
the same round trip as the publications to those heard, and published, in a second one, only
if a subscriber is there now. Skipping it then is as if it had been published to nobody: a
subscriber that comes just after loses what it would have lost just after a PUBLISH, and reads
what it watches once subscribed (an A2A stream re-reads its task; the dashboard renders
first). One Redis server, as the host runs it: a cluster's NUMSUB counts one node's only."""

import logging
import os
import threading

from django.conf import settings

log = logging.getLogger(__name__)


TIMEOUT = 5  # seconds: a stalled Redis holds the thread (and what queues meanwhile) no longer
HEARD = 1000  # channels known to be heard: past that, forgotten (each is asked about again)


class Publisher:
    def __init__(self, name):
        self.name = name
        self._forked()
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self):
        """A new process: no thread yet, nothing queued (a forked child's queue is its parent's),
        and a lock of its own (the parent's thread may have held the copied one)."""
        self._pid = None
        self._queued = threading.Condition()
        self._gathered = {}  # channel -> (its items, encode)

    def gather(self, channel, item, encode):
        """Queue `item` for one PUBLISH of `encode(items)` on `channel`, the items being those
        queued for it before the thread reaches them, in the order they came. `encode` runs on
        the publishing thread; its failure loses that channel's message, not the others."""
        if self._pid != os.getpid():
            self._start()
        with self._queued:
            if channel in self._gathered:
                self._gathered[channel][0].append(item)
            else:
                self._gathered[channel] = ([item], encode)
                self._queued.notify()

    def _start(self):
        with self._queued:
            if self._pid == os.getpid():
                return
            threading.Thread(target=self._run, name=self.name, daemon=True).start()
            self._pid = os.getpid()

    def _run(self):
        import redis  # (here: start-up need not load it)

        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT
        )
        heard = _Heard(client)
        while True:
            with self._queued:
                while not self._gathered:
                    self._queued.wait()
                gathered, self._gathered = self._gathered, {}
            heard.publish(gathered)


class _Heard:
    """The publishing thread's Redis client, and the channels whose last publication reached a
    subscriber (only those: a trace's channel that nobody heard is not kept; at most HEARD, as a
    stream that ended leaves its trace's channel here until it is published to again)."""

    def __init__(self, client):
        self.client, self.channels = client, set()

    def publish(self, gathered):
        """Publish `gathered` ({channel: (items, encode)}) to the channels someone listens to."""
        known = {c: sent for c, sent in gathered.items() if c in self.channels}
        asked = [c for c in gathered if c not in known]
        replies = self._send(known, asked)
        if asked and replies:
            listened = {c.decode() for c, count in replies[-1] if count}
            self._send({c: gathered[c] for c in asked if c in listened}, [])

    def _send(self, gathered, asked):
        """One round trip: `gathered`'s messages published, then NUMSUB of `asked`; None if
        it failed (logged: what it carried, and what it asked about, is lost)."""
        messages = self._encoded(gathered)
        if not messages and not asked:
            return []
        try:
            with self.client.pipeline(transaction=False) as pipe:
                for channel, message in messages:
                    pipe.publish(channel, message)
                if asked:
                    pipe.pubsub_numsub(*asked)
                replies = pipe.execute()
        except Exception as exc:
            lost = len(messages) + len(asked)
            log.warning("%d publications lost: %s: %s", lost, type(exc).__name__, exc)
            return None
        for (channel, _), count in zip(messages, replies, strict=False):
            (self.channels.add if count else self.channels.discard)(channel)
        if len(self.channels) > HEARD:
            self.channels.clear()
        return replies

    @staticmethod
    def _encoded(gathered):
        messages = []
        for channel, (items, encode) in gathered.items():
            try:
                messages.append((channel, encode(items)))
            except Exception as exc:
                log.warning("%s not encoded: %s: %s", channel, type(exc).__name__, exc)
        return messages


sends = Publisher("after-commit-sends")
