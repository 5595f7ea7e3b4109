"""A server whose tools are all rejected (a plain MCP server) is a warning, not "Connected":
in the model and on the admin's MCP server pages, with the reasons and the way to fix it."""

import pytest

from pools.discovery import discover
from pools.models import Mcplet, McpServer
from tests.pools import plain_server
from tests.pools.conftest import tool

pytestmark = pytest.mark.django_db

NO_TYPE = Mcplet.UNTYPED


def test_a_plain_mcp_server_is_a_warning_with_its_reasons():
    server = plain_server.discovered()
    assert server.status == McpServer.Status.CONNECTED
    assert (server.all_rejected, server.state) == (True, "warning")
    assert server.state_label == "Connected: every tool rejected"
    [(reason, tools)] = server.rejection_reasons()
    assert reason.startswith(NO_TYPE) and tools == 2
    # The same from a list's annotations, without a query per server.
    listed = McpServer.objects.with_tool_counts().get()
    assert (listed.accepted_count, listed.rejected_count, listed.state) == (0, 2, "warning")


def test_one_usable_tool_or_a_connection_error_is_no_such_warning(spec):
    mixed = spec([tool("query_crm"), tool("bad", "write")]).stdio()
    discover(mixed)
    assert mixed.status == "connected" and not mixed.all_rejected
    assert mixed.state_label == "Connected"
    Mcplet.objects.filter(status="accepted").update(status="rejected")
    assert mixed.all_rejected
    mixed.status = McpServer.Status.ERROR
    assert (mixed.all_rejected, mixed.state) == (False, "error")


def test_the_admin_shows_the_warning_and_links_the_guide(staff_client):
    server = plain_server.discovered()
    listing = staff_client.get("/admin/pools/mcpserver/").content.decode()
    assert "Connected: every tool rejected" in listing
    assert "Every tool it lists was rejected (2)" in listing
    assert NO_TYPE in listing and 'href="/dashboard/mcplets/writing-an-mcplet/"' in listing
    assert "<code>python -m mcplets.adapt --suggest -- COMMAND</code>" in listing
    page = staff_client.get(f"/admin/pools/mcpserver/{server.pk}/change/").content.decode()
    assert "Connected: every tool rejected" in page and NO_TYPE in page
    guide = staff_client.get("/dashboard/mcplets/writing-an-mcplet/")
    assert guide.status_code == 200
    assert "<h3>When the host rejects a tool</h3>" in guide.content.decode()
    assert "<h3>Connecting an MCP server that is not an MCPlet</h3>" in guide.content.decode()


def test_tools_rejected_for_another_reason_get_no_adapter_advice(spec, staff_client):
    """A server whose every tool is rejected for the names another server serves, say, is no
    plain MCP server: the adapter would not help."""
    broken = spec([tool("bad", "write")]).stdio()
    discover(broken)
    assert broken.all_rejected and not broken.plain
    listing = staff_client.get("/admin/pools/mcpserver/").content.decode()
    assert "Every tool it lists was rejected (1)" in listing
    assert "mcplets.adapt" not in listing
    dashboard = staff_client.get("/dashboard/mcplets/").content.decode()
    assert "all 1 tool rejected" in dashboard and "mcplets.adapt" not in dashboard
    assert plain_server.discovered().plain


def test_the_admin_form_refuses_a_stdio_command_that_is_not_installed(staff_client):
    data = {
        "name": "ghost",
        "transport": "stdio",
        "command": "no-such-mcp-server",
        "args_line": "--stdio",
        "enabled": "on",
    }
    page = staff_client.post("/admin/pools/mcpserver/add/", data)
    assert "The command &#x27;no-such-mcp-server&#x27; is not on the PATH on this host." in (
        page.content.decode()
    )
    assert not McpServer.objects.exists()
    data["command"] = "python"
    assert staff_client.post("/admin/pools/mcpserver/add/", data).status_code == 302
