"""The adapter on its own, in front of real third-party servers (the reference filesystem and
time servers, from the registries) and of the programmable server where a test needs to change
the upstream's tool list or read its call log."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import anyio
import mcp_types as types
import pytest
import yaml
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcplets.adapter.config import ConfigError, load_config, parse_config
from mcplets.adapter.suggest import suggest_tool
from mcplets.examples.programmable import SOURCE_ROOT, serve_http, stdio_params, write_spec
from tests.adapter.conftest import (
    EXAMPLES,
    adapter_args,
    adapter_session,
    suggested_draft,
    write_config,
)
from tests.conftest import Calls

STRICT = {"required": "passkey", "enforcement": "strict", "promptMessage": "Write it?"}


def names(listing):
    return sorted(t.name for t in listing.tools)


def host_meta(call):
    """The `_meta` an upstream call carried besides the protocol's own (2026-07-28) envelope."""
    meta = call["meta"] or {}
    return {k: v for k, v in meta.items() if not k.startswith("io.modelcontextprotocol/")}


def test_the_example_configurations_load():
    files = load_config(EXAMPLES / "filesystem.yaml")
    assert sorted(files.tools) == ["list_directory", "read_text_file", "search_files", "write_file"]
    assert files.tools["write_file"].strict and files.tools["write_file"].pool == "files-pool"
    assert sorted(load_config(EXAMPLES / "time.yaml").tools) == ["convert_time", "get_current_time"]


@pytest.mark.parametrize(
    ("tools", "problem"),
    [
        ({}, "names no tool"),
        ({"t": {"visibility": ["model"]}}, "missing ['mcpletType']"),
        ({"t": {"mcpletType": "write", "visibility": ["model"]}}, "§4: mcpletType MUST"),
        ({"t": {"mcpletType": "read", "visibility": "model"}}, "§8.1: visibility MUST"),
        ({"t": {"mcpletType": "action", "visibility": ["model"]}}, "MUST declare _meta.auth"),
        (
            {"t": {"mcpletType": "action", "visibility": ["app"], "auth": {"required": "pin"}}},
            "auth.required MUST be 'passkey'",
        ),
        ({"t": {"mcpletType": "read", "visibility": ["model"], "nope": 1}}, "unknown keys"),
        (
            {"t": {"mcpletType": "read", "visibility": ["model"], "arguments": {"type": 5}}},
            "arguments is not a valid JSON Schema",
        ),
    ],
)
def test_a_configuration_that_breaks_the_contract_is_refused(tools, problem):
    with pytest.raises(ConfigError) as caught:
        parse_config({"tools": tools}, "adapter.yaml")
    assert problem in str(caught.value) and str(caught.value).startswith("adapter.yaml")


def test_the_adapter_will_not_start_with_a_bad_configuration(tmp_path, time_bin):
    model_action = {"mcpletType": "action", "visibility": ["model"]}
    bad = write_config(tmp_path / "bad.json", {"t": model_action})
    finished = subprocess.run(
        [sys.executable, "-m", "mcplets.adapt", str(bad), "--", time_bin],
        cwd=SOURCE_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode != 0 and "§4.2/§5.3.1" in finished.stderr


def test_suggest_drafts_reads_and_gated_actions(tmp_path, filesystem_bin, shared):
    draft = suggested_draft(tmp_path / "draft.yaml", filesystem_bin, str(shared))
    text = draft.read_text()
    assert text.startswith("# A DRAFT")
    tools = yaml.safe_load(text)["tools"]
    assert len(tools) == 14  # every tool the server lists, for the operator to cut down
    for action in ("write_file", "edit_file", "move_file", "create_directory"):
        assert tools[action]["mcpletType"] == "action" and tools[action]["visibility"] == ["app"]
        assert tools[action]["auth"]["enforcement"] == "strict"
        assert tools[action]["auth"]["promptMessage"].startswith(f"Allow {action}? (")
    pool = "secure-filesystem-server-pool"  # after the upstream's name: no tool is pool-less
    for read in ("read_text_file", "list_directory", "search_files", "get_file_info"):
        assert tools[read] == {"mcpletType": "read", "visibility": ["model"], "pool": pool}
    assert {contract["pool"] for contract in tools.values()} == {pool}
    assert f"# - Every tool is in the pool {pool}: the host rejects them" in text
    assert "# action: the upstream marks it as writing\n  write_file:" in text
    load_config(draft)  # the draft is a configuration the adapter accepts as it is


@pytest.mark.parametrize(
    ("name", "hints", "drafted"),
    [
        ("get_weather", None, "read"),  # by its name
        ("search-orders", {}, "read"),
        ("lookup", {"readOnlyHint": True}, "read"),
        ("send_mail", None, "action"),  # nothing says it only reads
        ("getaway", None, "action"),  # a name is read by its words, not its letters
        ("list_and_purge", {"destructiveHint": True}, "action"),  # the upstream's word wins
        ("read_and_mark", {"readOnlyHint": False}, "action"),
        ("peek", {"readOnlyHint": True, "destructiveHint": True}, "action"),  # contradictory
    ],
)
def test_suggest_drafts_a_read_only_from_the_upstreams_hints_or_name(name, hints, drafted):
    annotations = types.ToolAnnotations.model_validate(hints) if hints is not None else None
    tool = types.Tool(name=name, input_schema={"type": "object"}, annotations=annotations)
    contract, why = suggest_tool(tool)
    assert contract["mcpletType"] == drafted and why.startswith(drafted)
    if drafted == "action":
        assert contract["visibility"] == ["app"] and contract["auth"]["enforcement"] == "strict"
        assert contract["auth"]["promptMessage"] == f"Allow {name}?"


def test_the_time_server_publishes_its_configured_reads(time_bin):
    async def scenario():
        async with adapter_session(EXAMPLES / "time.yaml", time_bin) as session:
            listing = await session.list_tools()
            now = await session.call_tool("get_current_time", {"timezone": "Asia/Tokyo"})
            bad = await session.call_tool("get_current_time", {"timezone": "../../etc/passwd"})
            unknown = await session.call_tool("get_current_time", {"timezone": "Mars/Olympus"})
            missing = await session.call_tool("get_current_time", {})  # the upstream refuses
            schema = await session.read_resource(listing.tools[0].meta["mcpletToolResultSchemaUri"])
        return listing, now, bad, unknown, missing, schema

    listing, now, bad, unknown, missing, schema = anyio.run(scenario)
    tools = {t.name: t for t in listing.tools}
    assert sorted(tools) == ["convert_time", "get_current_time"]
    assert tools["get_current_time"].meta == {
        "mcpletType": "read",
        "visibility": ["model"],
        "mcpletToolResultSchemaUri": "mcplet://tool-result-schema/get_current_time",
    }
    # The upstream's own input schema and description are what the host sees.
    assert "timezone" in tools["get_current_time"].input_schema["properties"]
    assert tools["convert_time"].description.startswith("Convert time between timezones")
    assert json.loads(schema.contents[0].text)["schema"]["required"] == ["timezone", "datetime"]
    body = now.structured_content
    assert not now.is_error and body["result"]["timezone"] == "Asia/Tokyo"
    assert body["_meta"] | {"timestamp": "t"} == {
        "timestamp": "t",
        "toolId": "get_current_time",
        "mcpletType": "read",
        "visibility": ["model"],
    }
    assert bad.is_error and bad.structured_content["error"]["code"] == "VALIDATION_ERROR"
    assert "the adapter's configured constraint" in bad.structured_content["error"]["message"]
    # The upstream's own refusal comes back as an error envelope, with its words.
    assert unknown.is_error and unknown.structured_content["error"]["code"] == "UNKNOWN_ERROR"
    assert "Mars/Olympus" in unknown.structured_content["error"]["message"]
    # Arguments the upstream's SDK refused (Python's MCPServer) are the caller's to correct.
    assert missing.is_error and missing.structured_content["error"]["code"] == "VALIDATION_ERROR"
    assert "timezone" in missing.structured_content["error"]["message"]


def test_arguments_the_filesystem_server_refuses_are_a_validation_error(filesystem_bin, shared):
    """The TypeScript SDK's refusal of arguments against the tool's schema, as an error result,
    is VALIDATION_ERROR; the server's other errors (a missing file) stay UNKNOWN_ERROR."""

    async def scenario():
        async with adapter_session(EXAMPLES / "filesystem.yaml", filesystem_bin, str(shared)) as s:
            wrong = await s.call_tool("read_text_file", {"path": 5})
            gone = await s.call_tool("read_text_file", {"path": str(shared / "gone.txt")})
        return wrong.structured_content["error"], gone.structured_content["error"]

    wrong, gone = anyio.run(scenario)
    assert wrong["code"] == "VALIDATION_ERROR", wrong
    assert "Invalid arguments for tool read_text_file" in wrong["message"]
    assert gone["code"] == "UNKNOWN_ERROR" and "ENOENT" in gone["message"]


@pytest.fixture
def upstream(tmp_path):
    """The programmable server as the upstream: its spec file and its call log."""
    spec, calls = tmp_path / "upstream.json", Calls(tmp_path / "upstream-calls.jsonl")

    def tool(name):
        return {"name": name, "description": f"{name} (upstream)", "result": {"did": name}}

    def write(*tools):
        write_spec(spec, [tool(n) for n in tools])

    write("lookup", "delete_everything")
    command, args = stdio_params(spec, calls_log=calls.path)
    return write, [command, *args], calls


CONFIG = {
    "lookup": {"mcpletType": "read", "visibility": ["model"]},
    "approve_refund": {
        "upstream": "refund",
        "mcpletType": "action",
        "visibility": ["app"],
        "auth": STRICT,
    },
    "confirm": {
        "upstream": "lookup",
        "mcpletType": "prepare",
        "visibility": ["app"],
        "auth": {**STRICT, "enforcement": "host-only"},
    },
}


def test_unconfigured_and_unverified_calls_never_reach_the_upstream(tmp_path, upstream):
    write, command, calls = upstream
    write("lookup", "refund", "delete_everything")
    config = write_config(tmp_path / "adapter.json", CONFIG)
    env = {"MCPLET_VERIFY_URL": "http://127.0.0.1:9/auth/verify-assertion"}
    assertion = {"type": "passkey_assertion", "credential": {"id": "x"}}

    async def scenario():
        async with adapter_session(config, *command, env=env) as session:
            listing = await session.list_tools()
            gone = await session.call_tool("delete_everything", {})
            bare = await session.call_tool("approve_refund", {"order": 7})
            unverifiable = await session.call_tool(
                "approve_refund", {"order": 7}, meta={"mcplet_auth": assertion}
            )
            confirmed = await session.call_tool(
                "confirm", {"q": 1}, meta={"mcplet_auth": assertion, "idempotencyKey": "k"}
            )
        return listing, gone, bare, unverifiable, confirmed

    listing, gone, bare, unverifiable, confirmed = anyio.run(scenario)
    assert names(listing) == ["approve_refund", "confirm", "lookup"]
    assert gone.structured_content["error"]["code"] == "NOT_FOUND"
    assert bare.structured_content["error"]["code"] == "AUTH_REQUIRED"
    assert unverifiable.structured_content["error"]["code"] == "SERVICE_UNAVAILABLE"
    assert "verify-assertion endpoint" in unverifiable.structured_content["error"]["message"]
    # Only the host-confirmed call ran, under the upstream's own name and without the `_meta`
    # (the assertion is between the host and the adapter).
    assert confirmed.structured_content["result"] == {"did": "lookup"}
    assert [(c["name"], c["arguments"], host_meta(c)) for c in calls()] == [
        ("lookup", {"q": 1}, {})
    ]


def test_list_changed_is_forwarded_after_the_configuration_is_applied_again(tmp_path, upstream):
    write, command, calls = upstream
    config = write_config(tmp_path / "adapter.json", CONFIG)
    notices = []

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            notices.append(message)

    async def wait_for(session, expected):
        with anyio.fail_after(15):
            while names(await session.list_tools()) != expected:
                await anyio.sleep(0.1)

    async def scenario():
        async with adapter_session(config, *command, message_handler=on_message) as session:
            assert names(await session.list_tools()) == ["confirm", "lookup"]
            write("lookup", "refund", "delete_everything", "drop_tables")
            await wait_for(session, ["approve_refund", "confirm", "lookup"])
            assert notices
            write("delete_everything")  # the configured tools are gone upstream
            await wait_for(session, [])
            refund = await session.call_tool("approve_refund", {})
        return refund

    refund = anyio.run(scenario)
    assert refund.structured_content["error"]["code"] == "NOT_FOUND"
    assert calls() == []


def test_an_adapter_whose_upstream_is_gone_says_so_and_exits(tmp_path, time_bin):
    """So that the host sees the server go, and relaunches both when it reconnects."""
    pid = tmp_path / "upstream.pid"
    upstream = ["sh", "-c", f"echo $$ > {pid}; exec {time_bin}"]
    errlog = tmp_path / "adapter.err"

    async def scenario():
        params = StdioServerParameters(
            command=sys.executable,
            args=adapter_args(EXAMPLES / "time.yaml", *upstream),
            cwd=SOURCE_ROOT,
        )
        with errlog.open("w") as err:
            async with (
                stdio_client(params, errlog=err) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                os.kill(int(pid.read_text()), signal.SIGKILL)
                await anyio.sleep(0.5)
                call = await session.call_tool("get_current_time", {"timezone": "Asia/Tokyo"})
                with anyio.fail_after(15), pytest.raises(MCPError, match="Connection closed"):
                    while True:
                        await session.send_ping()
                        await anyio.sleep(0.2)
        return call

    call = anyio.run(scenario)
    assert call.structured_content["error"]["code"] == "SERVICE_UNAVAILABLE"
    assert call.structured_content["error"]["retryable"] is True  # a read
    assert f"mcplets.adapt: the upstream server sh -c echo $$ > {pid}" in errlog.read_text()


def test_over_streamable_http_on_both_sides(tmp_path, upstream):
    """`--url` for an HTTP upstream, `--transport streamable-http` for the adapter itself."""
    write, _, calls = upstream
    config = write_config(tmp_path / "adapter.json", CONFIG)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def scenario(url):
        async with (
            streamable_http_client(url) as (read, write_stream),
            ClientSession(read, write_stream) as session,
        ):
            await session.initialize()
            listing = await session.list_tools()
            return listing, await session.call_tool("lookup", {"q": "ramen"})

    with serve_http(tmp_path / "upstream.json", calls_log=calls.path) as upstream_url:
        adapter = subprocess.Popen(
            [sys.executable, "-m", "mcplets.adapt", str(config), "--url", upstream_url]
            + ["--transport", "streamable-http", "--port", str(port)],
            cwd=SOURCE_ROOT,
        )
        try:
            deadline = time.monotonic() + 20
            while True:  # uvicorn listens once the lifespan (the upstream session) is up
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert adapter.poll() is None and time.monotonic() < deadline
                    time.sleep(0.1)
            listing, found = anyio.run(scenario, f"http://127.0.0.1:{port}/mcp")
        finally:
            adapter.terminate()
            adapter.wait(timeout=10)
    assert names(listing) == ["confirm", "lookup"]
    assert found.structured_content["result"] == {"did": "lookup"}
    assert [(c["name"], c["arguments"], host_meta(c)) for c in calls()] == [
        ("lookup", {"q": "ramen"}, {})
    ]


def test_a_result_that_breaks_the_configured_schema_is_not_passed_on(tmp_path, upstream):
    _, command, calls = upstream
    visits = {"type": "object", "properties": {"visits": {"type": "integer"}}}
    config = write_config(
        tmp_path / "adapter.json",
        {
            "lookup": {
                "mcpletType": "read",
                "visibility": ["model"],
                "resultSchema": {**visits, "required": ["visits"]},
            }
        },
    )

    async def scenario():
        async with adapter_session(config, *command) as session:
            return await session.call_tool("lookup", {})

    result = anyio.run(scenario)
    assert result.structured_content["error"] == {
        "message": "the upstream's result does not match the configured result schema",
        "code": "UNKNOWN_ERROR",
    }
    assert "did" not in str(result.content)
    assert [c["name"] for c in calls()] == ["lookup"]
