"""Django's ASGI handler, with a request's middleware and view in one hop to a kept thread.

Django's own handler runs the middleware chain in async mode. With sync views and the usual
middleware (each a MiddlewareMixin, sync code) that is a hop to a thread and back for each
middleware's request hook and again for its response hook: about twenty a request, a large
share of a small request's CPU. The host's views are sync, so here the chain is built in sync
mode and all of it runs in the one thread-sensitive hop Django makes for a sync view anyway.
An async view still runs on the server's loop (the sync chain calls it through async_to_sync),
and the handler still sends the response, a stream included, from the loop.

Django also gives each request a thread of its own (a new executor in a ThreadSensitiveContext),
and a second thread to join it afterwards. Here a request borrows a kept one-thread executor,
so a thread serves one request at a time, as before, and many requests in turn."""

import os
import threading
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers import asgi

KEPT = 32  # idle request threads kept per process; more are let go


class RequestThread(ThreadPoolExecutor):
    """One thread, for one request at a time; it knows whether work is still queued on it."""

    def __init__(self):
        super().__init__(max_workers=1, thread_name_prefix="request")
        self._lock, self.pending = threading.Lock(), 0

    def submit(self, fn, /, *args, **kwargs):
        with self._lock:
            self.pending += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, future):
        with self._lock:
            self.pending -= 1


class ASGIHandler(asgi.ASGIHandler):
    def __init__(self):
        self.load_middleware(is_async=False)
        self._idle, self._pid = [], os.getpid()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        thread = self._borrow()
        try:
            async with ThreadSensitiveContext(executor=thread):
                await self.handle(scope, receive, send)
        finally:
            self._give_back(thread)

    async def get_response_async(self, request):
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)

    def _borrow(self):
        if self._pid != os.getpid():  # a forked child has none of its parent's threads
            self._idle, self._pid = [], os.getpid()
        return self._idle.pop() if self._idle else RequestThread()

    def _give_back(self, thread):
        # A request cut short (its client gone) may leave its sync code running: that thread
        # ends once it is done, and serves no other request.
        if thread.pending or len(self._idle) >= KEPT:
            thread.shutdown(wait=False)
        else:
            self._idle.append(thread)
