"""Best-effort sends after a commit (the dashboard's group messages, the A2A announcements),
off the caller's thread: the caller only queues; one daemon thread per process runs an event
loop that awaits each send in order, its clients keeping their connections on that loop.

`async_to_sync` in the caller would cost it a new event loop and a new connection per message
(~10 ms on every audited tool call), and even a plain Redis round trip is a share of a gateway
call's overhead. Started lazily and again after a fork (Celery's prefork children do not
inherit threads).

Sends of one kind gather (`gather`): what is queued while the loop has not yet reached the
first of them goes out in that one send, so a busy process makes one Redis round trip for many
messages, and an idle one sends each at once. The kinds gathered meanwhile wake the loop once
(waking it costs the caller a write to its self-pipe, and the loop a turn)."""

import asyncio
import logging
import os
import threading

log = logging.getLogger(__name__)


class Background:
    def __init__(self, name):
        self.name = name
        self._lock = threading.Lock()
        self._pid = None
        self._gathered = {}  # kind -> (the items its queued send will take, send, what)

    def submit(self, send, what):
        """Await `send()` on the loop after what was submitted before; a failure is logged as
        `what` failing (that message is lost, not the next), never raised to the caller."""
        if self._pid != os.getpid():
            self._start()
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (send, what))

    def gather(self, kind, item, send, what):
        """Queue `item` for `send(items)`, awaited once for all the items of `kind` queued
        before the loop reaches them, in the order they came; kinds in the order they came."""
        if self._pid != os.getpid():
            self._start()
        with self._lock:
            waking = not self._gathered
            if kind in self._gathered:
                self._gathered[kind][0].append(item)
            else:
                self._gathered[kind] = ([item], send, what)
        if waking:
            self.submit(self._send_gathered, "gathered sends")

    async def _send_gathered(self):
        with self._lock:
            gathered, self._gathered = self._gathered, {}
        for items, send, what in gathered.values():
            await self._send(lambda send=send, items=items: send(items), what)

    def _start(self):
        with self._lock:
            if self._pid == os.getpid():
                return
            self._gathered = {}  # a forked child's: its parent's queued sends are not its own
            self._loop = asyncio.new_event_loop()
            self._queue = asyncio.Queue()
            ready = threading.Event()
            threading.Thread(target=self._run, args=(ready,), name=self.name, daemon=True).start()
            ready.wait(5)
            self._pid = os.getpid()

    def _run(self, ready):
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(ready.set)
        self._loop.run_until_complete(self._pump())

    async def _pump(self):
        while True:
            await self._send(*await self._queue.get())

    @staticmethod
    async def _send(send, what):
        try:
            await send()
        except Exception as exc:
            log.warning("%s failed: %s: %s", what, type(exc).__name__, exc)


sends = Background("after-commit-sends")
