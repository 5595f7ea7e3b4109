"""An MCPlet server's own spans (docs/tracing.md, "What the MCP servers emit"): with OTEL_*
asking for them, the kit (`mcplets.serving.traced`) exports the MCP SDK's SERVER spans over
OTLP/HTTP, children of the `_meta.traceparent` they came with, as the server's own service, the
last ones sent as the server ends; a console exporter writes to standard error, never into the
stdio transport. Real server processes, an OTLP/HTTP receiver here."""

import secrets
import sys
import threading

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from mcplets import serving
from mcplets.examples.programmable import SOURCE_ROOT, stdio_params, write_spec
from tests.otlp import Receiver, value
from tests.processes import wait_until

pytestmark = pytest.mark.anyio

TOOL = {"name": "lookup", "_meta": {"mcpletType": "read", "visibility": ["model"]}}


@pytest.fixture
def receiver():
    server = Receiver(serving.free_port())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


async def test_a_stdio_servers_call_is_a_span_of_the_callers_trace(tmp_path, receiver):
    command, args = stdio_params(write_spec(tmp_path / "tools.json", [TOOL]))
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        # Nothing is sent while it runs: what arrives was sent as the server ended.
        "OTEL_BSP_SCHEDULE_DELAY": "600000",
    }
    params = StdioServerParameters(command=command, args=args, env=env, cwd=SOURCE_ROOT)
    trace_id, caller = secrets.token_hex(16), secrets.token_hex(8)
    async with Client(stdio_client(params)) as client:
        meta = {"traceparent": f"00-{trace_id}-{caller}-01"}
        result = await client.call_tool("lookup", {"q": "x"}, meta=meta)
        assert not result.is_error
        assert receiver.trace(trace_id) == {}

    wait_until(lambda: receiver.trace(trace_id), "the server's span, sent as it ended")
    ((resource, span),) = receiver.trace(trace_id).values()
    assert resource["service.name"] == "programmable"  # the server's name
    assert (span.name, span.kind) == ("tools/call lookup", Span.SPAN_KIND_SERVER)
    assert span.parent_span_id.hex() == caller
    attributes = {a.key: value(a.value) for a in span.attributes}
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["gen_ai.tool.name"] == "lookup"


async def test_an_http_server_is_the_service_otel_service_name_says(receiver, monkeypatch):
    """A restaurant MCPlet (`mcplets.restaurant.common.main`) over streamable HTTP, stopped as a
    supervisor stops it (SIGTERM): its spans are flushed, under OTEL_SERVICE_NAME."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "crm-shinjuku")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")
    port = serving.free_port()
    command = [sys.executable, "-m", "mcplets.restaurant.crm", "--transport", "streamable-http"]
    with serving.listening([*command, "--port", str(port)], port):
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            assert (await client.list_tools()).tools
    wait_until(lambda: receiver.spans, "the server's spans, sent as it stopped")
    assert {r["service.name"] for r, _ in receiver.spans} == {"crm-shinjuku"}
    assert "tools/list" in {s.name for _, s in receiver.spans}


async def test_a_console_exporter_leaves_the_stdio_transport_alone(tmp_path):
    command, args = stdio_params(write_spec(tmp_path / "tools.json", [TOOL]))
    env = {"OTEL_TRACES_EXPORTER": "console"}
    params = StdioServerParameters(command=command, args=args, env=env, cwd=SOURCE_ROOT)
    with (tmp_path / "stderr").open("w+") as errlog:
        async with Client(stdio_client(params, errlog)) as client:
            assert not (await client.call_tool("lookup", {})).is_error
        errlog.seek(0)
        assert '"name": "tools/call lookup"' in errlog.read()
