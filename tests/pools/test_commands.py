import json
import shlex
import socket
import subprocess
import sys
import time
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from mcplets.examples.programmable import serve_http, stdio_params
from pools.models import McpServer
from tests.pools.conftest import tool
from tests.processes import ROOT, environment, free_port

pytestmark = pytest.mark.django_db


def run(*args):
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_add_mcp_server_stdio_and_http(tmp_path):
    out, _ = run(
        "add_mcp_server", "crm", "--stdio", "python -m mcplets.examples.notes", "--env", "TOKEN=abc"
    )
    crm = McpServer.objects.get(name="crm")
    assert (crm.transport, crm.command, crm.args, crm.env) == (
        "stdio",
        "python",
        ["-m", "mcplets.examples.notes"],
        {"TOKEN": "abc"},
    )
    assert "Registered crm" in out and "abc" not in out

    out, _ = run(
        "add_mcp_server",
        "erp",
        "--url",
        "http://localhost:9100/mcp",
        "--header",
        "Authorization: Bearer x",
        "--no-check",  # not up yet
    )
    assert McpServer.objects.get(name="erp").headers == {"Authorization": "Bearer x"}
    assert "not checked" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["crm", "--url", "not a url"], "url: Enter an http:// or https:// URL with a host."),
        (["crm", "--stdio", ""], "--stdio needs a command."),
        (["crm", "--url", "http://x/mcp", "--header", "nocolon"], "write NAME:value"),
    ],
)
def test_add_mcp_server_refuses_bad_input(args, message):
    with pytest.raises(CommandError, match=message):
        run("add_mcp_server", *args)
    assert not McpServer.objects.exists()


def test_add_mcp_server_refuses_a_duplicate_name():
    run("add_mcp_server", "crm", "--url", "http://x/mcp", "--no-check")
    with pytest.raises(CommandError, match="already exists"):
        run("add_mcp_server", "crm", "--url", "http://y/mcp", "--no-check")


def test_add_mcp_server_checks_that_a_url_answers_mcp(spec):
    server = spec([tool("query_crm")])
    with serve_http(server.path) as url:
        out, _ = run("add_mcp_server", "crm", "--url", url)
        assert "which answers MCP 2026-07-28" in out
        assert McpServer.objects.get(name="crm").protocol_version == "2026-07-28"
        command, args = stdio_params(server.path, protocols="2025")
        old, _ = run("add_mcp_server", "hr", "--stdio", shlex.join([command, *args]))
        assert "which answers MCP 2025-11-25" in old
        wrong = url.replace("/mcp", "/nope")
        with pytest.raises(CommandError) as refused:
            run("add_mcp_server", "erp", "--url", wrong)
    assert f"erp: {wrong} answered HTTP 404 Not Found" in str(refused.value)
    assert "--no-check" in str(refused.value)
    down = f"http://127.0.0.1:{free_port()}/mcp"
    with pytest.raises(CommandError, match=f"down: {down}: ConnectError: Connection refused"):
        run("add_mcp_server", "down", "--url", down, "--timeout", "5")
    assert list(McpServer.objects.values_list("name", flat=True)) == ["crm", "hr"]


def test_add_mcp_server_waits_its_timeout_and_no_more():
    """The SDK tries `server/discover`, then `initialize`, each with the whole timeout: the check
    as a whole keeps to it."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, and never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/mcp"
        started = time.monotonic()
        with pytest.raises(CommandError, match=r"silent: no answer within 2 s"):
            run("add_mcp_server", "silent", "--url", url, "--timeout", "2")
        assert time.monotonic() - started < 3.5
    assert not McpServer.objects.exists()


def test_add_mcp_server_checks_that_a_stdio_command_exists_and_starts():
    with pytest.raises(CommandError, match="the command 'no-such-mcp-server' is not on the PATH"):
        run("add_mcp_server", "ghost", "--stdio", "no-such-mcp-server --flag")
    with pytest.raises(CommandError, match="/nowhere/server does not exist"):
        run("add_mcp_server", "ghost", "--stdio", "/nowhere/server")
    crash = "import sys; sys.stderr.write('crm: CRM_TOKEN is not set\\n'); sys.exit(3)"
    with pytest.raises(CommandError) as failed:
        run("add_mcp_server", "crm", "--stdio", shlex.join(["python", "-c", crash]))
    # The reason is in the error, from the server's stderr (which went to its log).
    assert "ends with:\ncrm: CRM_TOKEN is not set" in str(failed.value)
    assert not McpServer.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_servers_output_stays_out_of_the_commands_output(tmp_path, spec):
    """A stdio server's stderr goes to its log; an HTTP server's requests are not logged."""

    def manage(*args):
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=environment(MCPLET_VAR_DIR=str(tmp_path)),
            capture_output=True,
            text=True,
            timeout=120,
        )

    added = manage("add_mcp_server", "plain", "--stdio", "python -m tests.pools.plain_server")
    discovered = manage("discover_mcplets", "plain")
    assert "plain: 0 accepted, 2 rejected" in discovered.stderr
    with serve_http(spec([tool("query_crm")]).path) as url:
        over_http = manage("add_mcp_server", "crm", "--url", url)
    for done in (added, discovered, over_http):
        assert done.returncode == 0, done.stderr
        assert "listening on stdio" not in done.stdout + done.stderr
        assert "HTTP Request" not in done.stdout + done.stderr
    log = (tmp_path / "log" / "plain.log").read_text()
    assert "launching python -m tests.pools.plain_server" in log
    assert log.count("plain server: listening on stdio") == 2  # the check, then discovery


def test_discover_mcplets_prints_one_row_per_tool(spec):
    server = spec([tool("query_crm"), tool("bad", "write")])
    command, args = stdio_params(server.path)
    run("add_mcp_server", "crm", "--stdio", shlex.join([command, *args]))

    out, err = run("discover_mcplets", "crm")
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["NAME", "SERVER", "TYPE"]
    assert any(line.startswith("query_crm") and "accepted" in line for line in lines)
    assert any(
        line.startswith("bad") and "rejected" in line and "'write'" in line for line in lines
    )
    assert "crm: 1 accepted, 1 rejected, 0 evicted" in err

    out, _ = run("discover_mcplets", "crm", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert {r["name"]: r["status"] for r in rows} == {"bad": "rejected", "query_crm": "accepted"}
    assert rows[1] == {
        "name": "query_crm",
        "server": "crm",
        "type": "read",
        "pool": "",
        "visibility": "model",
        "auth": "",
        "status": "accepted",
        "reason": "",
    }


def test_discover_mcplets_fails_when_a_server_does_not_answer(spec):
    server = spec([tool("query_crm")])
    command, args = stdio_params(server.path)
    run("add_mcp_server", "crm", "--stdio", shlex.join([command, *args]))
    run("add_mcp_server", "down", "--url", "http://127.0.0.1:1/mcp", "--no-check")
    with pytest.raises(CommandError, match="1 server\\(s\\) did not answer: down: "):
        run("discover_mcplets", "--timeout", "5")
    assert McpServer.objects.get(name="crm").status == "connected"


def test_discover_mcplets_names_an_unknown_server():
    with pytest.raises(CommandError, match="No MCP server named nosuch"):
        run("discover_mcplets", "nosuch")


def test_admin_discover_now(staff_client, spec):
    ok = spec([tool("query_crm"), tool("bad", "write")]).stdio()
    down = McpServer.objects.create(name="down", transport="http", url="http://127.0.0.1:1/mcp")
    page = staff_client.post(
        "/admin/pools/mcpserver/",
        {"action": "discover_now", "_selected_action": [ok.pk, down.pk]},
        follow=True,
    )
    shown = [str(m) for m in page.context["messages"]]
    assert shown[0] == "crm: 1 accepted, 1 rejected, 0 evicted"
    assert shown[1].startswith("down did not answer: down: ")
    assert "Crm: 1 accepted, 1 rejected" in page.content.decode()
    listing = staff_client.get("/admin/pools/mcplet/?status__exact=rejected").content.decode()
    assert "bad" in listing and "is not one of read, prepare, action" in listing


def test_add_mcp_server_behind_oauth(monkeypatch, tmp_path):
    from mcplets.examples.oauth_protected import serve
    from passkey import links

    monkeypatch.setattr(links, "_serving_pages", False)  # a command, in another shell
    monkeypatch.setattr(links, "running_host", lambda: {"origin": "http://localhost:8171"})
    with serve(clients={"mcplet-host": "cs-1"}) as base:
        out, _ = run("add_mcp_server", "tracker", "--url", f"{base}/mcp", "--oauth")
        server = McpServer.objects.get(name="tracker")
        assert server.auth == McpServer.Auth.OAUTH
        # the running host's (`runhost --port 8171`), not the settings' default origin
        link = f"http://localhost:8171/admin/pools/mcpserver/{server.pk}/oauth/connect/"
        assert link in out

        with pytest.raises(CommandError, match="put the client secret in"):
            run("add_mcp_server", "m2m", "--url", f"{base}/mcp", "--client-credentials", "x")
        monkeypatch.setenv("MCPLET_OAUTH_CLIENT_SECRET", "cs-1")
        args = ["--client-credentials", "mcplet-host", "--issuer", base]
        out, _ = run("add_mcp_server", "m2m", "--url", f"{base}/mcp", *args)
        assert "which answers MCP 2026-07-28" in out
        m2m = McpServer.objects.get(name="m2m")
        assert (m2m.auth, m2m.oauth_client_id, m2m.oauth_client_secret) == (
            McpServer.Auth.CLIENT_CREDENTIALS,
            "mcplet-host",
            "cs-1",
        )
        monkeypatch.setenv("MCPLET_OAUTH_CLIENT_SECRET", "wrong")
        with pytest.raises(CommandError, match="refused the host: Token exchange failed"):
            run("add_mcp_server", "m2m-wrong", "--url", f"{base}/mcp", *args)
    assert not McpServer.objects.filter(name="m2m-wrong").exists()
