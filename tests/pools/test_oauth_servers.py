"""A server behind OAuth (the MCP authorization spec), as an operator meets one today: its 401
is said to be OAuth, with where its Protected Resource Metadata is — not a bare "401" — and a
token it accepts, given as a header, connects it. (Connecting in admin is issue 25's.)"""

import anyio
import pytest

from agents.models import Agent
from mcplet_host import gateway
from mcplets.examples.oauth_protected import serve
from pools.discovery import discover
from pools.mcp_client import ServerUnreachable
from pools.models import McpServer
from tests.conftest import Calls
from tests.mcplets.test_oauth_protected import Browser, MemoryStorage, connect

pytestmark = pytest.mark.django_db


def test_a_server_behind_oauth_says_so_and_a_token_it_accepts_connects_it(tmp_path):
    calls = Calls(tmp_path / "calls.jsonl")
    with serve(calls_log=calls.path) as base:
        server = McpServer.objects.create(name="tracker", transport="http", url=f"{base}/mcp")
        with pytest.raises(ServerUnreachable) as refused:
            discover(server, timeout=10)
        metadata = f"{base}/.well-known/oauth-protected-resource/mcp"
        assert str(refused.value) == (
            f"tracker: {base}/mcp answered HTTP 401 Unauthorized: it is protected by OAuth (its "
            f"Protected Resource Metadata: {metadata}). Choose OAuth as its authentication and "
            "connect it in admin (MCP servers → the server → Connect…), or give it a token it "
            "accepts as a header (Authorization: Bearer …)"
        )

        storage = MemoryStorage()

        async def authorize():  # as the SDK's own client does it, with a person's consent
            async with connect(base, storage, Browser()):
                pass

        anyio.run(authorize)
        server.headers = {"Authorization": f"Bearer {storage.tokens.access_token}"}
        server.save()
        assert discover(server, timeout=10).accepted == 1
        agent = Agent.objects.create(agent_id="reader", display_name="Reader")
        outcome = gateway.call_tool(agent, "whoami", {"echo": "hi"})
        assert outcome.status == "executed", outcome.envelope
        (call,) = calls("whoami")
        assert call["subject"] == storage.client_info.client_id
