"""The programmable server's `--protocols` (which MCP generations it serves) and its
`inputRequired` rounds (2026-07-28 multi round-trip results), through the SDK's own client."""

import contextlib
import json
import uuid

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from mcplets.examples.programmable import SOURCE_ROOT, serve_http, stdio_params, write_spec
from tests.conftest import Calls

pytestmark = pytest.mark.anyio

PROTOCOLS = ["both", "2025", "2026"]
NEGOTIATED = {"both": "2026-07-28", "2025": "2025-11-25", "2026": "2026-07-28"}
URL_ROUND = {
    "login": {
        "method": "elicitation/create",
        "params": {"mode": "url", "message": "Sign in", "url": "https://auth.example.com/x"},
    }
}
FORM_ROUND = {
    "table": {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "Which table?",
            "requestedSchema": {"type": "object", "properties": {"t": {"type": "string"}}},
        },
    }
}
TOOLS = [
    {"name": "login", "inputRequired": [URL_ROUND]},
    {"name": "two_rounds", "inputRequired": [URL_ROUND, FORM_ROUND]},
]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """The spec and calls log all of this module's servers share."""
    folder = tmp_path_factory.mktemp("generations")
    return write_spec(folder / "spec.json", TOOLS), Calls(folder / "calls.jsonl")


@pytest.fixture(scope="module")
def http_urls(upstream):
    """One HTTP server per `--protocols` value, for the whole module."""
    spec, calls = upstream
    with contextlib.ExitStack() as stack:
        serve = {p: serve_http(spec, calls_log=calls.path, protocols=p) for p in PROTOCOLS}
        yield {p: stack.enter_context(server) for p, server in serve.items()}


@pytest.fixture(params=["stdio", "streamable-http"])
def target(request, upstream, http_urls):
    """`target(protocols)`: what `Client` connects to, over this test's transport."""
    spec, calls = upstream

    def make(protocols):
        if request.param == "streamable-http":
            return http_urls[protocols]
        command, args = stdio_params(spec, calls_log=calls.path, protocols=protocols)
        return StdioServerParameters(command=command, args=args, cwd=SOURCE_ROOT)

    return make


def mcp_error(exc: BaseException) -> MCPError:
    """The MCPError inside what `Client` raised (stdio's task group wraps it in a group)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    assert isinstance(exc, MCPError), exc
    return exc


@pytest.mark.parametrize("protocols", PROTOCOLS)
async def test_auto_negotiates_the_generation_served(target, protocols):
    async with Client(target(protocols), mode="auto") as client:
        assert client.protocol_version == NEGOTIATED[protocols]
        assert {t.name for t in (await client.list_tools()).tools} == {"login", "two_rounds"}


@pytest.mark.parametrize("protocols", ["both", "2025"])
async def test_the_handshake_is_answered(target, protocols):
    async with Client(target(protocols), mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"


async def test_a_2026_only_server_refuses_the_handshake(target):
    with pytest.raises(BaseException) as caught:
        async with Client(target("2026"), mode="legacy"):
            pass
    error = mcp_error(caught.value).error
    assert error.code == types.UNSUPPORTED_PROTOCOL_VERSION == -32022
    assert error.data == {"supported": ["2026-07-28"], "requested": "2025-11-25"}


async def test_input_required_rounds_then_the_result(target, upstream):
    _, calls = upstream
    arguments = {"call": uuid.uuid4().hex}  # this test's calls in the shared log
    async with Client(target("2026")) as client:
        session = client.session
        first = await session.call_tool("login", arguments, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert (
            first.model_dump(mode="json", by_alias=True, exclude_none=True)["inputRequests"]
            == URL_ROUND
        )
        accepted = {"login": types.ElicitResult(action="accept")}
        done = await session.call_tool(
            "login",
            arguments,
            input_responses=accepted,
            request_state=first.request_state,
            allow_input_required=True,
        )
    assert isinstance(done, types.CallToolResult) and not done.is_error
    assert done.structured_content == {
        "ok": True,
        "tool": "login",
        "arguments": arguments,
        "inputResponses": {"login": {"action": "accept"}},
    }
    logged = [c for c in calls("login") if c["arguments"] == arguments]
    assert len(logged) == 2
    assert logged[0]["requestState"] is None and logged[0]["inputResponses"] is None
    # The handler saw its own plaintext; the client only ever held the sealed token.
    state = json.loads(logged[1]["requestState"])
    assert state["round"] == 1 and first.request_state != logged[1]["requestState"]
    assert logged[1]["inputResponses"] == {"login": {"action": "accept"}}


async def test_each_round_in_turn(upstream, http_urls):
    _, calls = upstream
    arguments = {"call": uuid.uuid4().hex}
    async with Client(http_urls["both"]) as client:
        session = client.session
        first = await session.call_tool("two_rounds", arguments, allow_input_required=True)
        second = await session.call_tool(
            "two_rounds",
            arguments,
            input_responses={"login": types.ElicitResult(action="accept")},
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(second, types.InputRequiredResult)
        assert (
            second.model_dump(mode="json", by_alias=True, exclude_none=True)["inputRequests"]
            == FORM_ROUND
        )
        table = {"table": types.ElicitResult(action="accept", content={"t": "patio"})}
        done = await session.call_tool(
            "two_rounds",
            arguments,
            input_responses=table,
            request_state=second.request_state,
            allow_input_required=True,
        )
    assert done.structured_content["inputResponses"] == {
        "table": {"action": "accept", "content": {"t": "patio"}}
    }
    states = [c["requestState"] for c in calls("two_rounds") if c["arguments"] == arguments]
    assert states[0] is None
    assert [json.loads(s)["round"] for s in states[1:]] == [1, 2]
    assert len({json.loads(s)["call"] for s in states[1:]}) == 1


async def test_a_forged_or_moved_state_is_refused(upstream, http_urls):
    _, calls = upstream
    arguments = {"call": uuid.uuid4().hex}
    async with Client(http_urls["2026"]) as client:
        session = client.session
        first = await session.call_tool("login", arguments, allow_input_required=True)
        forged = json.dumps({"round": 1, "call": "mine"})
        with pytest.raises(MCPError) as caught:
            await session.call_tool("login", arguments, request_state=forged)
        assert caught.value.error.code == types.INVALID_PARAMS
        # A genuine state is bound to its call's arguments.
        with pytest.raises(MCPError):
            await session.call_tool("login", {"call": "other"}, request_state=first.request_state)
    assert len([c for c in calls("login") if c["arguments"] == arguments]) == 1


async def test_a_handshake_session_ignores_input_required(upstream, http_urls):
    arguments = {"call": uuid.uuid4().hex}
    async with Client(http_urls["both"], mode="legacy") as client:
        result = await client.call_tool("login", arguments)
    assert result.structured_content == {"ok": True, "tool": "login", "arguments": arguments}
