"""The example MCPlet (`python -m mcplets.examples.notes`) as a host reaches it: stdio and HTTP."""

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
ASSERTION = {"type": "passkey_assertion", "signature": "c2ln"}


async def exercise(session: ClientSession) -> None:
    await session.initialize()
    tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert tools["search_notes"].meta == {
        "mcpletType": "read",
        "visibility": ["model"],
        "mcpletToolResultSchemaUri": "mcplet://tool-result-schema/search_notes",
    }
    assert tools["draft_note"].meta == {"mcpletType": "prepare", "visibility": ["model", "app"]}
    assert tools["add_note"].meta["auth"]["enforcement"] == "strict"
    assert tools["add_note"].meta["pool"] == "notes-pool"

    found = await session.call_tool("search_notes", {"contains": "rain"})
    assert found.structured_content["result"]["notes"][0]["id"] == 1

    duplicate = await session.call_tool(
        "draft_note", {"text": "Rain tomorrow: offer a free dessert to keep bookings"}
    )
    assert duplicate.is_error is True
    assert duplicate.structured_content["error"]["code"] == "X_DUPLICATE_NOTE"

    refused = await session.call_tool("add_note", {"text": "Call the florist"})
    assert refused.structured_content["error"]["code"] == "AUTH_REQUIRED"
    forged = await session.call_tool(
        "add_note", {"text": "Call the florist"}, meta={"mcplet_auth": {"type": "password"}}
    )
    assert forged.structured_content["error"]["code"] == "AUTH_FAILED"
    added = await session.call_tool(
        "add_note", {"text": "Call the florist"}, meta={"mcplet_auth": ASSERTION}
    )
    assert added.is_error is False
    assert added.structured_content["result"] == {"id": 2, "text": "Call the florist"}
    assert added.structured_content["_meta"]["visibility"] == ["app"]

    schema = await session.read_resource("mcplet://tool-result-schema/search_notes")
    assert schema.contents[0].mime_type == "application/json"


async def test_example_over_stdio():
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mcplets.examples.notes"], cwd=ROOT
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await exercise(session)


@pytest.fixture
def http_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "mcplets.examples.notes", "--transport", "streamable-http"]
    process = subprocess.Popen([*command, "--port", str(port)], cwd=ROOT, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_example_over_streamable_http(http_url):
    async with (
        streamable_http_client(http_url) as (read, write),
        ClientSession(read, write) as session,
    ):
        await exercise(session)
