"""A server that forgets the host's session — it restarted — answers HTTP 404 to its
`Mcp-Session-Id` (MCP 2025-11-25, streamable HTTP: the client MUST then start a new session).
That request did not run: the host opens a new session and sends the call once more."""

import pytest

from mcplets.examples.programmable import serve_http
from pools.mcp_client import ServerConfig
from pools.models import McpServer
from pools.sessions import sessions
from tests.pools.conftest import tool
from tests.processes import free_port

pytestmark = pytest.mark.django_db


def test_a_call_after_the_server_restarted_runs_once_on_a_new_session(spec):
    crm = spec([tool("query_crm"), tool("send_mail", "action")])
    port = free_port()

    def serve():
        return serve_http(crm.path, calls_log=crm.calls.path, port=port, protocols="2025")

    try:
        with serve() as url:
            server = McpServer.objects.create(name="crm", transport="http", url=url)
            config = ServerConfig.of(server)
            assert not sessions.call_tool(config, "query_crm", {"n": 1}).is_error
            forgotten = sessions.session_id(server.pk)
            assert forgotten
        with serve():
            for name, n in (("send_mail", 2), ("query_crm", 3)):
                result = sessions.call_tool(config, name, {"n": n})
                assert not result.is_error, result
            assert sessions.session_id(server.pk) not in ("", forgotten)
    finally:
        sessions.close_all()
    # Each call ran once: the one the restarted server refused (404) had not run.
    assert [(c["name"], c["arguments"]["n"]) for c in crm.calls()] == [
        ("query_crm", 1),
        ("send_mail", 2),
        ("query_crm", 3),
    ]
