"""Each server at the newest MCP revision both sides speak: 2026-07-28 (`server/discover`) or
the 2025-11-25 handshake, over stdio and streamable HTTP — recorded on the server, shown to the
operator, and every call carries the W3C trace context; a server that shares no revision with
the host is a clear error naming its revisions."""

import sys

import anyio
import pytest
from django.urls import reverse

from agents.models import Agent
from mcplet_host import gateway
from pools.discovery import discover, list_all_tools
from pools.mcp_client import ServerConfig, ServerUnreachable, open_session
from pools.models import McpServer
from tests.pools.conftest import tool

pytestmark = pytest.mark.django_db

MATRIX = [  # (the server's generations, the revision the host must agree on)
    ("both", "2026-07-28"),
    ("2026", "2026-07-28"),
    ("2025", "2025-11-25"),
]
TRACE = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize(("protocols", "agreed"), MATRIX)
def test_discovery_and_a_read_on_each_generation(spec, http_server, transport, protocols, agreed):
    crm = spec([tool("query_crm")])
    server = crm.stdio(protocols=protocols) if transport == "stdio" else None
    server = server or http_server(crm, protocols=protocols)

    report = discover(server)
    server.refresh_from_db()
    assert (report.accepted, server.protocol_version) == (1, agreed)

    agent = Agent.objects.create(agent_id="reader", display_name="Reader")
    outcome = gateway.call_tool(agent, "query_crm", {}, trace=TRACE)
    assert outcome.status == "executed" and "result" in outcome.envelope, outcome.envelope
    (call,) = crm.calls()
    assert call["meta"]["traceparent"].split("-")[1] == TRACE.replace("-", "")
    modern = "io.modelcontextprotocol/protocolVersion" in call["meta"]
    assert modern == (agreed == "2026-07-28")


def test_a_server_sharing_no_revision_is_a_clear_error(staff_client):
    server = McpServer.objects.create(
        name="future",
        transport="stdio",
        command=sys.executable,
        args=["-m", "tests.pools.future_server"],
    )
    with pytest.raises(ServerUnreachable) as refused:
        discover(server, timeout=10)
    message = str(refused.value)
    assert message.startswith("future: the server speaks MCP 2099-01-01; this host speaks ")
    assert "2025-11-25" in message and "2026-07-28" in message
    server.refresh_from_db()
    assert server.status == McpServer.Status.ERROR and "2099-01-01" in server.last_error


def test_the_operator_sees_each_servers_revision(spec, staff_client):
    old, new = spec([tool("query_hr")], name="hr"), spec([tool("query_crm")])
    discover(old.stdio(protocols="2025"))
    discover(new.stdio())
    for page in (reverse("dashboard:mcplets"), reverse("admin:pools_mcpserver_changelist")):
        html = staff_client.get(page).content.decode()
        assert "2025-11-25" in html and "2026-07-28" in html


@pytest.mark.parametrize(("ttl_ms", "relisted"), [(60_000, False), (0, True)])
def test_a_quiet_servers_list_is_taken_from_the_cache_while_its_ttl_lasts(spec, ttl_ms, relisted):
    """Re-discovery of a quiet 2026-07-28 server (the watcher's check) asks for the list again
    only once its `ttlMs` has run out. The server changes its tools without telling this
    session (no subscription is open), so what comes back shows whether it was asked."""
    crm = spec([tool("query_crm")])
    crm.write([tool("query_crm")], list_ttl_ms=ttl_ms)
    config = ServerConfig.of(crm.stdio(protocols="2026"))

    async def listings():
        async with open_session(config, timeout=10) as client:
            first = await list_all_tools(client, cache_mode="use")
            crm.write([tool("query_crm"), tool("query_hr")], list_ttl_ms=ttl_ms)
            await anyio.sleep(0.5)  # the server reloads its spec within 0.1 s
            quiet = await list_all_tools(client, cache_mode="use")
            asked = await list_all_tools(client, cache_mode="refresh")
            return [[t.name for t in tools] for tools in (first, quiet, asked)]

    first, quiet, asked = anyio.run(listings)
    assert first == ["query_crm"] and asked == ["query_crm", "query_hr"]
    assert quiet == (asked if relisted else first)
