"""Best-effort sends after a commit (the dashboard's group messages, the A2A announcements),
off the caller's thread: the caller only queues; one daemon thread per process runs an event
loop that awaits each send in order, its clients keeping their connections on that loop.

`async_to_sync` in the caller would cost it a new event loop and a new connection per message
(~10 ms on every audited tool call), and even a plain Redis round trip is a share of a gateway
call's overhead. Started lazily and again after a fork (Celery's prefork children do not
inherit threads)."""

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

    def submit(self, send, what):
        """Await `send()` on the loop after what was submitted before; a failure is logged as
        `what` failing (that message is lost, not the next), never raised to the caller."""
        if self._pid != os.getpid():
            self._start()
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (send, what))

    def _start(self):
        with self._lock:
            if self._pid == os.getpid():
                return
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
            send, what = await self._queue.get()
            try:
                await send()
            except Exception as exc:
                log.warning("%s failed: %s: %s", what, type(exc).__name__, exc)


sends = Background("after-commit-sends")
