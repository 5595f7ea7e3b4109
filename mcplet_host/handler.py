"""Django's ASGI handler, with a request's middleware and view in one hop to a kept thread.

Django's own handler runs the middleware chain in async mode. With sync views and the usual
middleware (each a MiddlewareMixin, sync code) that is a hop to a thread and back for each
middleware's request hook and again for its response hook: about twenty a request, a large
share of a small request's CPU. The host's views are sync, so here the chain is built in sync
mode and all of it runs in the one thread-sensitive hop Django makes for a sync view anyway.
An async view still runs on the server's loop (the sync chain calls it through async_to_sync),
and the handler still sends the response, a stream included, from the loop.

Django also hops to the thread to send `request_started` before the chain, and again to close
the response after sending it (its `request_finished`). Here a response sent whole (its content
already made) is closed on the request's thread before it is sent, and the signal is sent there
first: one hop a request. A streamed response is closed once sent, as in Django's handler.

Django also gives each request a thread of its own (a new executor in a ThreadSensitiveContext),
and a second thread to join it afterwards. Here a request borrows a kept one-thread executor,
so a thread serves one request at a time, as before, and many requests in turn."""

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers import asgi
from django.http import FileResponse
from django.urls import set_script_prefix

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

    async def handle(self, scope, receive, send):
        """Django's, but for what runs on the request's thread (`_response`): as there, a client
        that leaves while its response is made or sent cancels the sending."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(asgi.get_script_prefix(scope))
        tasks = [
            asyncio.create_task(self.listen_for_disconnect(receive)),
            asyncio.create_task(self._respond(scope, body_file, send)),
        ]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if not task.done():
                task.cancel()
            try:
                await task
            except (RequestAborted, asyncio.CancelledError):
                pass
            except AssertionError:
                body_file.close()
                raise
        try:
            response = tasks[1].result()
        except asyncio.CancelledError:
            await signals.request_finished.asend(sender=self.__class__)
        else:
            if response.streaming:
                await sync_to_async(response.close)()
        body_file.close()

    async def _respond(self, scope, body_file, send):
        response = await sync_to_async(self._response, thread_sensitive=True)(scope, body_file)
        with suppress(asyncio.CancelledError):  # the client left meanwhile
            await self.send_response(response, send)
        return response

    def _response(self, scope, body_file):
        """On the request's thread: `request_started`, the request, its middleware and view,
        and the close of a response that is not streamed (its `request_finished`)."""
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self.get_response(request)
            response._handler_class = self.__class__
            if isinstance(response, FileResponse):
                response.block_size = self.chunk_size  # the ASGI server chunks
        if not response.streaming:
            response.close()
        return response

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
