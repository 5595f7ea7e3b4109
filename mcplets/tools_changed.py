"""Telling a low-level `Server`'s clients that its tool list changed, in both protocol eras:
a `notifications/tools/list_changed` to every connected handshake-era session, and a
`ToolsListChanged` event to 2026-07-28 `subscriptions/listen` streams.

    server = ToolsChangedServer("name", on_list_tools=..., ...)
    notifier = ToolsChangedNotifier(server)
    ...
    await notifier.notify()
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged


class ToolsChangedServer(Server):
    """A `Server` that declares `tools.listChanged`. The HTTP session manager builds the
    initialize result without options, so the flag has to be the default rather than passed
    in by whoever runs the server."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


class ToolsChangedNotifier:
    """The sessions of `server` that completed the handshake and are still connected, and the
    subscription bus of its `subscriptions/listen` handler (both installed on `server`)."""

    def __init__(self, server: Server) -> None:
        self.sessions: set[ServerSession] = set()
        self.bus = InMemorySubscriptionBus()
        server.add_notification_handler(
            "notifications/initialized", types.NotificationParams, self._track_session
        )
        server.add_request_handler(
            "subscriptions/listen", types.SubscriptionsListenRequestParams, ListenHandler(self.bus)
        )

    async def _track_session(self, ctx: ServerRequestContext, params: Any) -> None:
        # The low-level server has no public "connection closed" hook, so this handler stays
        # parked for the connection's lifetime: the dispatcher cancels it when the client leaves.
        self.sessions.add(ctx.session)
        try:
            await anyio.sleep_forever()
        finally:
            self.sessions.discard(ctx.session)

    async def notify(self) -> None:
        for session in list(self.sessions):
            await session.send_tool_list_changed()
        await self.bus.publish(ToolsListChanged())
