"""Django's ASGI handler, with a request's middleware and view in one hop to a thread.

Django's own handler runs the middleware chain in async mode. With sync views and the usual
middleware (each a MiddlewareMixin, sync code) that is a hop to a thread and back for each
middleware's request hook and again for its response hook: about twenty a request, a large
share of a small request's CPU. The host's views are sync, so here the chain is built in sync
mode and all of it runs in the one thread-sensitive hop Django makes for a sync view anyway.
An async view still runs on the server's loop (the sync chain calls it through async_to_sync),
and the handler still sends the response, a stream included, from the loop."""

from asgiref.sync import sync_to_async
from django.core.handlers import asgi


class ASGIHandler(asgi.ASGIHandler):
    def __init__(self):
        self.load_middleware(is_async=False)

    async def get_response_async(self, request):
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)
