"""The programmable discovery server (`mcplets.examples.programmable`) through real MCP clients."""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.subscriptions import ToolsListChanged

from mcplets.examples.programmable import (
    SOURCE_ROOT,
    serve_http,
    stdio_params,
    write_spec,
)

pytestmark = pytest.mark.anyio

TRANSPORTS = ["stdio", "streamable-http"]
NOTIFY_WITHIN = 1.0


def tool(name: str, **extra: Any) -> dict[str, Any]:
    uri = f"mcplet://tool-result-schema/{name}"
    meta = {"mcpletType": "read", "visibility": ["model"], "mcpletToolResultSchemaUri": uri}
    return {"name": name, "description": f"The {name} tool", "_meta": meta, **extra}


class Watcher:
    """A `message_handler` that counts tools/list_changed notifications."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.count += 1
            self._changed.set()

    async def wait(self) -> None:
        with anyio.fail_after(NOTIFY_WITHIN):
            await self._changed.wait()
        self._changed = anyio.Event()


@asynccontextmanager
async def connect(
    transport: str,
    spec_path,
    *,
    page_size: int = 0,
    calls_log=None,
    message_handler=None,
    dispatcher: bool = False,
) -> AsyncIterator[tuple[ClientSession, JSONRPCDispatcher | None]]:
    """An initialized session; with `dispatcher=True` also the dispatcher, for raw requests."""
    if transport == "stdio":
        command, args = stdio_params(spec_path, page_size=page_size, calls_log=calls_log)
        params = StdioServerParameters(command=command, args=args, cwd=SOURCE_ROOT)
        async with (
            stdio_client(params) as (read, write),
            open_session(read, write, message_handler, dispatcher) as opened,
        ):
            yield opened
        return
    with serve_http(spec_path, page_size=page_size, calls_log=calls_log) as url:
        async with (
            get_stream_signalling_client() as (http_client, get_stream_open),
            streamable_http_client(url, http_client=http_client) as (read, write),
            open_session(read, write, message_handler, dispatcher) as opened,
        ):
            # Server-initiated notifications ride the GET stream the client opens in the
            # background after `initialize`; anything sent before it is up is lost.
            with anyio.fail_after(5):
                await get_stream_open.wait()
            yield opened


@asynccontextmanager
async def open_session(read, write, message_handler, raw: bool):
    dispatcher = JSONRPCDispatcher(read, write) if raw else None
    if dispatcher is not None:
        session = ClientSession(dispatcher=dispatcher, message_handler=message_handler)
    else:
        session = ClientSession(read, write, message_handler=message_handler)
    async with session:
        await session.initialize()
        yield session, dispatcher


@asynccontextmanager
async def get_stream_signalling_client():
    opened = anyio.Event()

    async def on_response(response: httpx2.Response) -> None:
        if response.request.method == "GET" and response.status_code == 200:
            opened.set()

    async with create_mcp_http_client() as http_client:
        http_client.event_hooks["response"].append(on_response)
        yield http_client, opened


async def list_all(session: ClientSession) -> tuple[list[types.Tool], int]:
    tools: list[types.Tool] = []
    pages = 0
    cursor = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        page = await session.list_tools(params=params)
        tools += page.tools
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            return tools, pages


@pytest.fixture
def spec_path(tmp_path):
    return tmp_path / "spec.json"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_pagination_returns_every_tool_with_its_meta(transport, spec_path):
    published = [tool(f"tool_{i:02d}") for i in range(8)]
    published[3]["inputSchema"] = {"type": "object", "properties": {"q": {"type": "string"}}}
    write_spec(spec_path, published)
    async with connect(transport, spec_path, page_size=3) as (session, _):
        first = await session.list_tools()
        assert len(first.tools) == 3 and first.next_cursor

        tools, pages = await list_all(session)
    assert pages == 3
    assert [t.name for t in tools] == [t["name"] for t in published]
    assert [t.meta for t in tools] == [t["_meta"] for t in published]
    assert tools[3].input_schema == published[3]["inputSchema"]
    assert tools[0].input_schema == {"type": "object", "properties": {}}


async def test_bad_cursor_is_invalid_params(spec_path):
    write_spec(spec_path, [tool("a"), tool("b")])
    async with connect("stdio", spec_path, page_size=1) as (session, _):
        with pytest.raises(MCPError) as caught:
            await session.list_tools(params=types.PaginatedRequestParams(cursor="not-ours"))
    assert caught.value.error.code == types.INVALID_PARAMS


async def test_malformed_meta_is_published_untouched(spec_path):
    malformed = [
        {"name": "no_meta"},
        {"name": "bad_type", "_meta": {"mcpletType": 5, "visibility": "model"}},
        {"name": "odd_values", "_meta": {"auth": None, "pool": ["x", {"y": [1.5, True]}]}},
        {"name": "no_type", "_meta": {"visibility": ["model"], "unknownKey": {"deep": {}}}},
    ]
    write_spec(spec_path, malformed)
    async with connect("stdio", spec_path, page_size=2) as (session, _):
        tools, _pages = await list_all(session)
    assert [t.name for t in tools] == ["no_meta", "bad_type", "odd_values", "no_type"]
    assert [t.meta for t in tools] == [None, *(entry["_meta"] for entry in malformed[1:])]


async def test_meta_that_is_not_an_object_reaches_the_wire(spec_path):
    # The SDK's client refuses the whole page; a raw request shows what the server sent.
    weird = {"name": "weird", "_meta": "not-an-object", "inputSchema": {"type": "string"}}
    write_spec(spec_path, [tool("fine"), weird])
    async with connect("stdio", spec_path, dispatcher=True) as (session, dispatcher):
        with pytest.raises(ValueError, match="_meta"):
            await session.list_tools()
        raw = await dispatcher.send_raw_request("tools/list", None)
    assert raw["tools"][1] == weird


async def test_calls_are_answered_and_logged(spec_path, tmp_path):
    calls_log = tmp_path / "calls.jsonl"
    write_spec(spec_path, [tool("plain"), tool("fixed", result={"answer": 42})])
    async with connect("stdio", spec_path, calls_log=calls_log) as (session, _):
        plain = await session.call_tool("plain", {"q": "x"}, meta={"mcplet_auth": {"t": "p"}})
        fixed = await session.call_tool("fixed", {})
        unknown = await session.call_tool("missing", {"a": 1})
    assert plain.is_error is False
    assert plain.structured_content == {"ok": True, "tool": "plain", "arguments": {"q": "x"}}
    assert json.loads(plain.content[0].text) == plain.structured_content
    assert fixed.structured_content == {"answer": 42}
    assert unknown.is_error is True
    logged = [json.loads(line) for line in calls_log.read_text().splitlines()]
    rounds = {"requestState": None, "inputResponses": None}
    assert logged == [
        {"name": "plain", "arguments": {"q": "x"}, "meta": {"mcplet_auth": {"t": "p"}}, **rounds},
        {"name": "fixed", "arguments": {}, "meta": None, **rounds},
        {"name": "missing", "arguments": {"a": 1}, "meta": None, **rounds},
    ]


async def test_result_schemas_and_resources_are_served(spec_path):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    write_spec(
        spec_path,
        [tool("typed", resultSchema=schema), tool("broken", rawResource="{not json")],
        resources={"mcplet://extra/readme": "hello"},
    )
    async with connect("streamable-http", spec_path) as (session, _):
        typed = await session.read_resource("mcplet://tool-result-schema/typed")
        broken = await session.read_resource("mcplet://tool-result-schema/broken")
        extra = await session.read_resource("mcplet://extra/readme")
        listed = await session.list_resources()
        with pytest.raises(MCPError):
            await session.read_resource("mcplet://tool-result-schema/nothing")
    payload = json.loads(typed.contents[0].text)
    assert typed.contents[0].mime_type == "application/json"
    assert payload["version"] == 1 and payload["schema"] == schema
    assert payload["_meta"]["deprecated"] is False
    assert set(payload["_meta"]) == {"createdAt", "deprecated", "deprecatedAt", "sunsetDate"}
    assert broken.contents[0].text == "{not json"
    assert extra.contents[0].text == "hello"
    assert {str(r.uri) for r in listed.resources} == {
        "mcplet://tool-result-schema/typed",
        "mcplet://tool-result-schema/broken",
        "mcplet://extra/readme",
    }


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_spec_changes_notify_an_open_session(transport, spec_path):
    tools = [tool(f"t{i}") for i in range(5)]
    write_spec(spec_path, tools)
    watcher = Watcher()
    async with connect(transport, spec_path, page_size=2, message_handler=watcher) as (session, _):
        assert len((await list_all(session))[0]) == 5

        write_spec(spec_path, [*tools, tool("added")])
        await watcher.wait()
        assert [t.name for t in (await list_all(session))[0]][-1] == "added"

        write_spec(spec_path, tools[1:])
        await watcher.wait()
        assert "t0" not in {t.name for t in (await list_all(session))[0]}

        changed = [{**tools[1], "_meta": {"mcpletType": "action", "pool": "p"}}, *tools[2:]]
        write_spec(spec_path, changed)
        await watcher.wait()
        listed = (await list_all(session))[0]
        assert listed[0].meta == {"mcpletType": "action", "pool": "p"}

        # A broken spec is ignored (no notification); the next good one is picked up.
        count = watcher.count
        spec_path.write_text("{broken")
        await anyio.sleep(0.3)
        assert watcher.count == count
        assert len((await list_all(session))[0]) == 4
        write_spec(spec_path, tools)
        await watcher.wait()
        assert len((await list_all(session))[0]) == 5


async def test_every_http_session_is_notified(spec_path):
    write_spec(spec_path, [tool("a")])
    watchers = [Watcher(), Watcher()]
    with serve_http(spec_path) as url:
        async with (
            get_stream_signalling_client() as (first_http, first_open),
            get_stream_signalling_client() as (second_http, second_open),
            streamable_http_client(url, http_client=first_http) as (read1, write1),
            streamable_http_client(url, http_client=second_http) as (read2, write2),
            ClientSession(read1, write1, message_handler=watchers[0]) as first,
            ClientSession(read2, write2, message_handler=watchers[1]) as second,
        ):
            await first.initialize()
            await second.initialize()
            with anyio.fail_after(5):
                await first_open.wait()
                await second_open.wait()
            write_spec(spec_path, [tool("a"), tool("b")])
            for watcher in watchers:
                await watcher.wait()
            assert len((await second.list_tools()).tools) == 2
    assert [w.count for w in watchers] == [1, 1]


async def test_2026_clients_hear_changes_through_listen(spec_path):
    # `Client` negotiates 2026-07-28 here (the server answers server/discover), where change
    # notifications only travel on subscriptions/listen streams.
    write_spec(spec_path, [tool("a")])
    with serve_http(spec_path, page_size=1) as url:
        async with Client(url) as client:
            assert client.protocol_version == "2026-07-28"
            assert [t.name for t in (await client.list_tools()).tools] == ["a"]
            async with client.listen(tools_list_changed=True) as subscription:
                write_spec(spec_path, [tool("b"), tool("c")])
                with anyio.fail_after(NOTIFY_WITHIN):
                    event = await subscription.__anext__()
            assert event == ToolsListChanged()
            page = await client.list_tools()
            assert [t.name for t in page.tools] == ["b"]
            second = await client.list_tools(cursor=page.next_cursor)
            assert [t.name for t in second.tools] == ["c"]
            assert second.tools[0].meta == tool("c")["_meta"]


def test_write_spec_always_moves_the_mtime_forward(spec_path):
    mtimes = []
    for i in range(5):
        write_spec(spec_path, [tool(f"t{i}")])
        mtimes.append(spec_path.stat().st_mtime_ns)
    assert mtimes == sorted(set(mtimes))
    assert json.loads(spec_path.read_text())["tools"][0]["name"] == "t4"
    assert list(spec_path.parent.iterdir()) == [spec_path]
