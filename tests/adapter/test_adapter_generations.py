"""The adapter between protocol generations: in front of a 2025-only and a 2026-only upstream (the
programmable server's `--protocols`), serving 2026-07-28 and 2025-11-25 clients, with the
upstream's `input_required` rounds passed through. Each upstream's adapter runs once for the
module (over streamable HTTP, so one process serves every client); the upstream's call log shows
what reached it."""

import contextlib
import os
import signal
import sys
import uuid

import anyio
import mcp_types as types
import pytest
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ToolsListChanged

from mcplets.examples.programmable import SOURCE_ROOT, stdio_params, write_spec
from mcplets.serving import free_port, listening
from tests.adapter.conftest import adapter_args, write_config
from tests.conftest import Calls

pytestmark = pytest.mark.anyio

PROTOCOL_META = "io.modelcontextprotocol/protocolVersion"
URL_ROUND = {
    "login": {
        "method": "elicitation/create",
        "params": {"mode": "url", "message": "Sign in", "url": "https://auth.example.com/x"},
    }
}
UPSTREAM = [
    {"name": "lookup", "result": {"did": "lookup"}},
    {"name": "book", "inputRequired": [URL_ROUND]},
]
READ = {"mcpletType": "read", "visibility": ["model"]}
CONFIG = {"lookup": READ, "book": READ, "later": READ}


class Upstream:
    """One upstream (the programmable server over stdio) and the adapter in front of it."""

    def __init__(self, folder, protocols):
        self.spec = write_spec(folder / "upstream.json", UPSTREAM)
        self.calls = Calls(folder / "calls.jsonl")
        self.config = write_config(folder / "adapter.json", CONFIG)
        command, args = stdio_params(self.spec, calls_log=self.calls.path, protocols=protocols)
        self.command = [command, *args]

    @contextlib.contextmanager
    def serving(self):
        """The adapter over streamable HTTP; its URL."""
        port = free_port()
        command = [sys.executable, "-m", "mcplets.adapt", str(self.config)]
        command += ["--transport", "streamable-http", "--port", str(port), "--", *self.command]
        with listening(command, port):
            yield f"http://127.0.0.1:{port}/mcp"

    def made(self, name, arguments):
        """The calls of `name` with `arguments` that reached the upstream."""
        return [c for c in self.calls(name) if c["arguments"] == arguments]


@pytest.fixture(scope="module")
def upstreams(tmp_path_factory):
    """A 2025-only and a 2026-only upstream, each behind its adapter: (Upstream, adapter URL)."""
    with contextlib.ExitStack() as stack:
        running = {}
        for protocols in ("2025", "2026"):
            upstream = Upstream(tmp_path_factory.mktemp(f"upstream-{protocols}"), protocols)
            running[protocols] = upstream, stack.enter_context(upstream.serving())
        yield running


def unique():
    return {"q": uuid.uuid4().hex}  # a test's own calls in the module's shared logs


@pytest.mark.parametrize("protocols", ["2025", "2026"])
@pytest.mark.parametrize("client_mode", ["auto", "legacy"])
async def test_discovery_and_a_call(upstreams, protocols, client_mode):
    upstream, url = upstreams[protocols]
    arguments = unique()
    async with Client(url, mode=client_mode) as client:
        listed = await client.list_tools()
        result = await client.call_tool("lookup", arguments)
    assert sorted(t.name for t in listed.tools) == ["book", "lookup"]
    assert result.structured_content["result"] == {"did": "lookup"}
    # The adapter reached the upstream in the only generation that upstream speaks.
    [call] = upstream.made("lookup", arguments)
    assert ((call["meta"] or {}).get(PROTOCOL_META) == "2026-07-28") == (protocols == "2026")


async def test_an_upstream_round_passes_through_to_a_2026_client(upstreams):
    upstream, url = upstreams["2026"]
    arguments = unique()
    async with Client(url) as client:
        assert client.protocol_version == "2026-07-28"
        session = client.session
        first = await session.call_tool("book", arguments, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        requests = first.model_dump(mode="json", by_alias=True, exclude_none=True)
        assert requests["inputRequests"] == URL_ROUND
        done = await session.call_tool(
            "book",
            arguments,
            input_responses={"login": types.ElicitResult(action="accept")},
            request_state=first.request_state,
            allow_input_required=True,
        )
    assert isinstance(done, types.CallToolResult) and not done.is_error
    assert done.structured_content["result"]["inputResponses"] == {"login": {"action": "accept"}}
    # Exactly one retry reached the upstream, carrying the state it had minted, unsealed by it:
    # the adapter passed its token on untouched both ways.
    first_call, retry = upstream.made("book", arguments)
    assert first_call["requestState"] is None
    assert retry["requestState"].startswith('{"round": 1')
    assert retry["inputResponses"] == {"login": {"action": "accept"}}


async def test_a_2025_client_cannot_carry_an_upstream_round(upstreams):
    upstream, url = upstreams["2026"]
    arguments = unique()
    async with Client(url, mode="legacy") as client:
        result = await client.call_tool("book", arguments)
    assert result.is_error
    error = result.structured_content["error"]
    assert error["code"] == "UNKNOWN_ERROR" and "handshake-era (2025) session" in error["message"]
    assert len(upstream.made("book", arguments)) == 1


async def test_a_2025_upstream_answers_at_once(upstreams):
    _, url = upstreams["2025"]
    arguments = unique()
    async with Client(url) as client:
        result = await client.session.call_tool("book", arguments, allow_input_required=True)
    assert result.structured_content["result"] == {
        "ok": True,
        "tool": "book",
        "arguments": arguments,
    }


@pytest.mark.parametrize("protocols", ["2025", "2026"])
async def test_upstream_list_changes_reach_a_2026_client(upstreams, protocols):
    upstream, url = upstreams[protocols]
    async with Client(url) as client, client.listen(tools_list_changed=True) as changes:
        try:
            write_spec(upstream.spec, [*UPSTREAM, {"name": "later"}])
            with anyio.fail_after(10):
                assert await changes.__anext__() == ToolsListChanged()
            assert sorted(t.name for t in (await client.list_tools()).tools) == [
                "book",
                "later",
                "lookup",
            ]
        finally:
            write_spec(upstream.spec, UPSTREAM)
        with anyio.fail_after(10):
            await changes.__anext__()


async def test_a_2026_client_over_stdio(tmp_path):
    upstream = Upstream(tmp_path, "2026")
    arguments = unique()
    adapter = StdioServerParameters(
        command=sys.executable,
        args=adapter_args(upstream.config, *upstream.command),
        cwd=SOURCE_ROOT,
    )
    async with Client(adapter) as client:
        assert client.protocol_version == "2026-07-28"
        first = await client.session.call_tool("book", arguments, allow_input_required=True)
        done = await client.session.call_tool(
            "book",
            arguments,
            input_responses={"login": types.ElicitResult(action="accept")},
            request_state=first.request_state,
        )
    assert done.structured_content["result"]["inputResponses"] == {"login": {"action": "accept"}}
    assert len(upstream.made("book", arguments)) == 2


@pytest.mark.parametrize("protocols", ["2025", "2026"])
async def test_a_gone_upstream_ends_the_adapter(tmp_path, protocols):
    """2026-07-28 has no ping: there the end of the change subscription tells."""
    upstream = Upstream(tmp_path, protocols)
    pid = tmp_path / "upstream.pid"
    shell = ["sh", "-c", f'echo $$ > {pid}; exec "$0" "$@"', *upstream.command]
    adapter = StdioServerParameters(
        command=sys.executable, args=adapter_args(upstream.config, *shell), cwd=SOURCE_ROOT
    )
    errlog = tmp_path / "adapter.err"
    with errlog.open("w") as err:
        async with (
            stdio_client(adapter, errlog=err) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            os.kill(int(pid.read_text()), signal.SIGKILL)
            with anyio.fail_after(15), pytest.raises(MCPError, match="Connection closed"):
                while True:
                    await session.send_ping()
                    await anyio.sleep(0.1)
    assert "mcplets.adapt: the upstream server sh -c" in errlog.read_text()
