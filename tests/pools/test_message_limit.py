"""What the host reads of an MCP server's HTTP answer: one message of at most
MCPLET_MAX_MESSAGE_BYTES (pools/bounded.py), as a JSON body or as an SSE event; a result under
the host's own MCPLET_MAX_RESULT always fits in it."""

import asyncio
import gzip
import json
import threading
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx2
import pytest

from agents.models import Agent
from mcplet_host import gateway
from mcplets.examples.programmable import serve_http
from pools import bounded
from pools.discovery import discover
from pools.mcp_client import ServerUnreachable
from pools.models import McpServer
from pools.sessions import sessions
from tests.pools.conftest import tool

pytestmark = pytest.mark.django_db


@pytest.fixture
def call(spec):
    """Serve one read tool answering `rows` over streamable HTTP, discover it, call it through
    the gateway: (the outcome, the calls its server received, the most memory the call
    allocated in this process)."""

    def run(rows, protocols):
        server_spec = spec([tool("report") | {"result": {"rows": rows}}])
        with serve_http(
            server_spec.path, calls_log=server_spec.calls.path, protocols=protocols
        ) as url:
            try:
                discover(McpServer.objects.create(name="crm", transport="http", url=url))
                agent = Agent.objects.create(agent_id="planning-agent", display_name="Planning")
                tracemalloc.start()
                try:
                    outcome = gateway.call_tool(agent, "report", {})
                    peak = tracemalloc.get_traced_memory()[1]
                finally:
                    tracemalloc.stop()
                return outcome, server_spec.calls(), peak
            finally:
                sessions.close_all()

    return run


@pytest.mark.parametrize("protocols", ["2025", "2026"])
def test_a_result_the_host_takes_arrives_whole_from_either_generation(call, protocols):
    # 600,000 characters, under MCPLET_MAX_RESULT; twice that on the wire (structured and as
    # text): past the SDK's own 1 MiB an SSE event, which lost it from a 2025-11-25 server.
    outcome, calls, _ = call("x" * 600_000, protocols)
    assert outcome.status == "executed"
    assert outcome.envelope["result"] == {"rows": "x" * 600_000}
    assert len(calls) == 1


def test_a_json_answer_past_the_limit_is_not_read_and_the_tool_ran(call, settings):
    settings.MCPLET_MAX_MESSAGE_BYTES = 65536
    outcome, calls, peak = call("y" * 8_000_000, "2026")
    error = outcome.envelope["error"]
    assert error["code"] == "X_RESULT_TOO_LARGE", error
    assert "MCPLET_MAX_MESSAGE_BYTES (65,536 bytes)" in error["message"]
    assert "the tool ran" in error["message"]
    assert len(calls) == 1  # and not sent again
    assert peak < 4_000_000  # the 16 MB answer was not read into memory (nor parsed)


def test_an_sse_event_past_the_limit_says_why_its_outcome_is_unknown(call, settings):
    settings.MCPLET_MAX_MESSAGE_BYTES = 65536
    outcome, calls, _ = call("z" * 200_000, "2025")
    error = outcome.envelope["error"]
    assert error["code"] == "X_OUTCOME_UNKNOWN"
    assert "exceeded the 65536 byte limit" in error["message"]
    assert len(calls) == 1


def test_a_tool_list_past_the_limit_fails_discovery_saying_so(spec, settings):
    settings.MCPLET_MAX_MESSAGE_BYTES = 65536
    long = [tool(f"t{i}") | {"description": "d" * 2000} for i in range(60)]
    server_spec = spec(long)
    with serve_http(server_spec.path, protocols="2026") as url:
        server = McpServer.objects.create(name="crm", transport="http", url=url)
        with pytest.raises(ServerUnreachable, match="over MCPLET_MAX_MESSAGE_BYTES"):
            discover(server)
    server.refresh_from_db()
    assert server.status == McpServer.Status.ERROR
    assert "MCPLET_MAX_MESSAGE_BYTES" in server.last_error
    assert not server.mcplets.exists()


class _Answers(BaseHTTPRequestHandler):
    """A JSON answer as the test sets it: gzip-coded, or large and chunked (no length)."""

    coded = False

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.coded:
            body = gzip.compress(json.dumps({"rows": "a" * 10_000_000}).encode())
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for _ in range(100):
            chunk = b"b" * 100_000
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args):
        pass


@pytest.mark.parametrize(("coded", "refused"), [(True, bounded.Encoded), (False, bounded.TooLarge)])
def test_the_hook_asks_for_no_coding_and_refuses_what_it_cannot_count(settings, coded, refused):
    settings.MCPLET_MAX_MESSAGE_BYTES = 65536
    handler = type("Answers", (_Answers,), {"coded": coded})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    async def post():
        hooks = {"response": [bounded.hold_to_limit]}
        async with httpx2.AsyncClient(headers=bounded.ACCEPT, event_hooks=hooks) as client:
            response = await client.post(f"http://127.0.0.1:{server.server_port}/", json={})
            return response

    try:
        with pytest.raises(refused):
            asyncio.run(post())
    finally:
        server.shutdown()
