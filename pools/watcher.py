"""Hot reload (spec §5.3.2): one MCP session per enabled server, re-discovered when its list
changes — `notifications/tools/list_changed` on 2025-11-25 sessions, a `subscriptions/listen`
stream on 2026-07-28 ones; servers added, edited or disabled in admin are picked up without a
restart; dropped servers are reconnected with backoff."""

import asyncio
import logging
import threading
from contextlib import asynccontextmanager, suppress

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections
from mcp.shared.exceptions import MCPError
from mcp_types import ToolListChangedNotification
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcplet_host import tracing
from pools.discovery import discover_with_session, list_all_tools, mark_server
from pools.mcp_client import ServerConfig, describe, open_session
from pools.models import McpServer

log = logging.getLogger(__name__)


def enabled_configs():
    close_old_connections()
    return {s.pk: ServerConfig.of(s) for s in McpServer.objects.filter(enabled=True)}


def is_modern(client):
    """A 2026-07-28 session: no `ping`, list changes by subscription."""
    return client.protocol_version in MODERN_PROTOCOL_VERSIONS


@asynccontextmanager
async def tools_changed(client, changed):
    """Set `changed` on every change of the tools (or of the resources their result schemas
    are read from). 2026-07-28 sessions must subscribe for it; older ones deliver
    tools/list_changed to the session's message handler."""
    if not is_modern(client):
        yield
        return
    try:
        subscription = client.listen(tools_list_changed=True, resources_list_changed=True)
        events = await subscription.__aenter__()
    except MCPError as exc:  # no subscriptions: the periodic re-discovery is the safety net
        log.info("no tools/list_changed subscription: %s", exc)
        yield
        return

    async def pump():
        async for _ in events:
            changed.set()

    task = asyncio.create_task(pump())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await subscription.__aexit__(None, None, None)


class Watcher:
    def __init__(self, poll_interval=2.0, ping_interval=10.0, timeout=30.0, max_backoff=60.0):
        self.poll_interval = poll_interval
        self.ping_interval = ping_interval
        self.timeout = timeout
        self.max_backoff = max_backoff

    async def run(self, stop):
        running = {}  # server id → (config, task)
        try:
            while not stop.is_set():
                configs = await sync_to_async(enabled_configs)()
                for server_id, (config, task) in list(running.items()):
                    if configs.get(server_id) != config:  # disabled, deleted or edited
                        await self._stop(task)
                        del running[server_id]
                        if server_id not in configs:
                            await sync_to_async(mark_server)(
                                server_id, McpServer.Status.DISCONNECTED
                            )
                for server_id, config in configs.items():
                    if server_id not in running:
                        running[server_id] = (config, asyncio.create_task(self.watch(config)))
                with suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.poll_interval)
        finally:
            for server_id, (_, task) in running.items():
                await self._stop(task)
                await sync_to_async(mark_server)(server_id, McpServer.Status.DISCONNECTED)
            await sync_to_async(connections.close_all)()

    async def watch(self, config):
        backoff, changed = 1.0, asyncio.Event()

        async def on_message(message):
            if isinstance(message, ToolListChangedNotification):
                changed.set()

        while True:
            try:
                await sync_to_async(mark_server)(config.id, McpServer.Status.CONNECTING)
                changed.clear()
                async with (
                    open_session(
                        config, timeout=self.timeout, message_handler=on_message
                    ) as session,
                    tools_changed(session, changed),
                ):
                    report = await discover_with_session(config, session)
                    log.info("watching %s", report)
                    backoff = 1.0
                    await self._follow(config, session, changed)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("%s: %s; reconnecting in %.0f s", config.name, describe(exc), backoff)
                await sync_to_async(mark_server)(config.id, McpServer.Status.ERROR, describe(exc))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)

    async def _follow(self, config, client, changed):
        # Over HTTP a change notified before the client's event stream was open is lost, so the
        # first quiet interval re-lists once instead of checking on the server.
        settled, listed = False, None
        while True:
            try:
                await asyncio.wait_for(changed.wait(), self.ping_interval)
            except TimeoutError:
                if settled:  # quiet: make sure the server is still there
                    listed, unchanged = await self._still_there(client, listed)
                    if unchanged:
                        continue
                settled = True
            changed.clear()
            listed = None
            log.info("re-discovered %s", await discover_with_session(config, client))

    async def _still_there(self, client, listed):
        """A quiet session's check: (the tool list as listed now, whether it is unchanged).
        2025-11-25: a ping (its changes come by notification). 2026-07-28 has no ping: the tool
        list, from the client's cache while its `ttlMs` lasts, unchanged if it is the previous
        one (or the first since a discovery)."""
        if not is_modern(client):
            await asyncio.wait_for(client.session.send_ping(), self.timeout)
            return listed, True
        tools = await asyncio.wait_for(list_all_tools(client, cache_mode="use"), self.timeout)
        now = [tool.model_dump(mode="json") for tool in tools]
        return now, listed in (None, now)

    @staticmethod
    async def _stop(task):
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def start_in_thread(**options):
    """Run a Watcher on its own event loop in a daemon thread; returns a function that stops it."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def run():
        with tracing.untraced():  # as the watcher's own process, which does not trace
            loop.run_until_complete(Watcher(**options).run(stop))

    thread = threading.Thread(
        target=run,
        name="mcplet-watcher",
        daemon=True,
    )
    thread.start()

    def stopper(timeout=10):
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout)

    return stopper
