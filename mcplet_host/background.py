"""Best-effort publications after a commit (the dashboard's live messages, the A2A streams'
announcements), off the caller's thread: the caller only queues; one daemon thread per process
publishes on Redis with a plain redis-py client.

Publishing in the caller would cost every audited tool call a Redis round trip, and an asyncio
loop for the sends cost more than the sends (redis.asyncio's machinery, a self-pipe wake per
batch: ~0.5 ms of CPU a gateway call). Started lazily and again after a fork (Celery's prefork
children do not inherit threads).

What is queued for one channel gathers (`gather`): what comes while the thread is busy goes in
one message, each channel once, and all channels in one pipeline (one round trip), in the order
they came; an idle thread publishes each at once."""

import logging
import os
import threading

from django.conf import settings

log = logging.getLogger(__name__)


TIMEOUT = 5  # seconds: a stalled Redis holds the thread (and what queues meanwhile) no longer


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
        while True:
            with self._queued:
                while not self._gathered:
                    self._queued.wait()
                gathered, self._gathered = self._gathered, {}
            messages = self._encoded(gathered)
            if messages:
                self._publish(client, messages)

    @staticmethod
    def _encoded(gathered):
        messages = []
        for channel, (items, encode) in gathered.items():
            try:
                messages.append((channel, encode(items)))
            except Exception as exc:
                log.warning("%s not encoded: %s: %s", channel, type(exc).__name__, exc)
        return messages

    @staticmethod
    def _publish(client, messages):
        try:
            with client.pipeline(transaction=False) as pipe:
                for channel, message in messages:
                    pipe.publish(channel, message)
                pipe.execute()
        except Exception as exc:
            log.warning("%d publications lost: %s: %s", len(messages), type(exc).__name__, exc)


sends = Publisher("after-commit-sends")
