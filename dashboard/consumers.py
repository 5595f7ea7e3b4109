import asyncio

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from dashboard import receivers
from dashboard.receivers import GROUP

REFUSED = 4403  # an application close code: "forbidden", like HTTP 403


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    """The dashboard's live stream, for active staff only. Read-only: it forwards the group's
    messages (see dashboard.receivers) and ignores what the browser sends.

    The origin is checked before this runs (AllowedHostsOriginValidator in mcplet_host.asgi),
    so another site cannot open it with the operator's session cookie."""

    joined = False

    async def connect(self):
        # AuthMiddleware has already loaded the user, so this reads no database.
        user = self.scope.get("user")
        if user is None or not (user.is_authenticated and user.is_active and user.is_staff):
            await self.close(code=REFUSED)
            return
        receivers.serving_loop = asyncio.get_running_loop()  # for the in-memory layer
        await self.channel_layer.group_add(GROUP, self.channel_name)
        self.joined = True
        await self.accept()
        await self.send_json({"type": "hello", "user": user.get_username()})

    async def disconnect(self, code):
        if self.joined:
            await self.channel_layer.group_discard(GROUP, self.channel_name)

    async def receive_json(self, content, **kwargs):
        return  # nothing is controlled over the socket: actions are audited POST forms

    async def dashboard_message(self, message):
        for payload in message["payloads"]:  # one frame each, as the page reads them
            await self.send_json(payload)
