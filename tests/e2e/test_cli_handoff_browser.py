"""A call made from the command line while the host runs, as a new user makes it: `runhost`
on a port of its own (`make run PORT=…`), and `manage.py call_tool` in another shell that knows
nothing of that port. The command's link names the host's port; the call is the host's, so it
never depends on the command's process: the wallet's notification that its step is done
reaches the host's own session and completes it, and an action's approval page is served by the
host after the command exits — and, after the host restarts, opened again from its page. Real
processes (runhost, the reference PWMA wallet, a stdio MCP server) and Chromium; embedded
(SQLite, in-memory broker) and with PostgreSQL and Redis."""

import json
import os
import re
import socket
import subprocess
import sys
import uuid
from urllib.parse import urlparse

import pytest
from playwright.sync_api import expect

from mcplets.examples.programmable import stdio_params, write_spec
from mcplets.examples.pwma_wallet import serve as serve_wallet
from tests import processes
from tests.browser import open_tab
from tests.conftest import Calls, entry
from tests.e2e.walkthrough import to_its_own_port
from tests.processes import ROOT, free_port, stop, wait_until

pytestmark = pytest.mark.django_db(transaction=True)
expect.set_options(timeout=30_000)

# What a new operator's shell passes on: nothing of the host's configuration.
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH")
INTENT = {"type": "mandate", "payee": "Shinjuku Bistro", "maxAmount": 120}
APPROVER, PASSWORD = "manager", "pw-approver-1"

SETUP = """
from django.contrib.auth import get_user_model
from agents.models import Agent
from pools.discovery import discover
from pools.models import McpServer
get_user_model().objects.create_superuser({approver!r}, "manager@example.org", {password!r})
for server in (
    McpServer.objects.create(name="wallet", transport="http", url={wallet!r} + "/mcp"),
    McpServer.objects.create(name="bistro", transport="stdio", command={command!r}, args={args!r}),
):
    discover(server)
    assert server.mcplets.filter(status="accepted").exists(), server.name
Agent.objects.create(agent_id="shopping-agent", display_name="Shopping")
"""


class Host:
    """`runhost --port` in its own var directory, and commands from another shell."""

    def __init__(self, env, var):
        self.env, self.var, self.port = env, var, free_port()
        self.base = f"http://localhost:{self.port}"
        self.process, self.starts = None, 0

    def manage(self, *args, timeout=180):
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def query(self, code):
        """Run Python in a command of the installation; what it printed last, as JSON."""
        result = self.manage("shell", "-c", code)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])

    def start(self):
        self.starts += 1
        log = self.var / f"runhost-{self.starts}.log"
        with log.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", "runhost", "--port", str(self.port)]
                + ["--restaurant-port", "0", "--concurrency", "2"],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

        def serving():
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", self.port)) == 0

        wait_until(
            lambda: "MCPlet Host on" in log.read_text() and serving(), "runhost", self.process
        )

    def stop(self):
        if self.process is not None:
            stop(self.process, 20)

    def log(self):
        return "\n".join(p.read_text() for p in sorted(self.var.glob("runhost-*.log")))


@pytest.fixture
def wallet(tmp_path):
    calls = Calls(tmp_path / "wallet-calls.jsonl")
    with serve_wallet(calls_log=calls.path) as base:
        yield base, calls


def environment(mode, var):
    if mode == "embedded":  # SQLite in the var directory, the in-memory broker: `make run`
        env = {name: os.environ[name] for name in INHERITED if name in os.environ}
        env |= {"SECRET_KEY": "handoff-test", "MCPLET_VAR_DIR": str(var)}
        return env | {"PYTHONUNBUFFERED": "1"}
    # The test's PostgreSQL database and Redis, a queue and cache prefix of this test's own.
    env = processes.environment(
        DJANGO_SETTINGS_MODULE="tests.settings",
        MCPLET_TEST_NAMESPACE=f"handoff-{uuid.uuid4().hex[:8]}",
        MCPLET_VAR_DIR=str(var),
    )
    for name in ("MCPLET_PORT", "PASSKEY_ORIGIN", "PASSKEY_MODE", "DISPLAY"):
        env.pop(name, None)
    return env


@pytest.fixture(params=["embedded", pytest.param("redis", marks=pytest.mark.services)])
def host(request, tmp_path, wallet):
    var = tmp_path / "var"
    var.mkdir()
    host = Host(environment(request.param, var), var)
    host.mode = request.param
    if request.param == "embedded":
        migrated = host.manage("migrate", "--noinput")
        assert migrated.returncode == 0, migrated.stderr
    bistro = Calls(tmp_path / "bistro-calls.jsonl")
    spec = write_spec(tmp_path / "bistro.json", [entry("book_table", "action", ("app",))])
    command, args = stdio_params(spec, calls_log=bistro.path)
    code = SETUP.format(
        approver=APPROVER, password=PASSWORD, wallet=wallet[0], command=command, args=args
    )
    setup = host.manage("shell", "-c", code)
    assert setup.returncode == 0, setup.stderr
    host.bistro = bistro
    try:
        host.start()
        yield host
    finally:
        host.stop()  # also one that never got to listen


def held_at(output):
    """The link the command printed."""
    return re.search(r" at (http://\S+)$", output, re.MULTILINE).group(1)


def sign_in_and_register(page, host):
    page.goto(f"{host.base}/passkey/login/")
    page.fill("#id_username", APPROVER)
    page.fill("#id_password", PASSWORD)
    page.click("form.login button")
    page.wait_for_url(f"{host.base}/passkey/register/")
    page.fill("#name", "virtual key")
    with page.expect_navigation():
        page.click("#register button")
        expect(page.locator("#status")).to_contain_text("Registered")


def test_a_call_from_the_command_line_is_the_running_hosts(page, host, wallet):
    wallet_url, wallet_calls = wallet
    sign_in_and_register(page, host)
    trace = str(uuid.uuid4())

    # 1. A wallet's step: the command prints the host's own link and what waits, and exits.
    arguments = json.dumps({"requestId": "req-cli", "walletIntent": INTENT})
    called = host.manage(
        "call_tool", "--agent", "shopping-agent", "--tool", "aaif.pwma.request",
        "--args", arguments, "--trace", trace,
    )  # fmt: skip
    assert called.returncode == 0, called.stderr
    assert "No host is running" not in called.stderr
    out = called.stdout
    assert out.startswith(
        "The call is held for a step a person must take on the server wallet's side before "
        "aaif.pwma.request is sent again, until "
    )
    assert "wallet says: the holder must approve" in out and "an action" not in out
    link = held_at(out)
    assert link.startswith(f"{host.base}/passkey/ceremonies/") and "8000" not in out
    token = link.rstrip("/").rsplit("/", 1)[1]

    # The person takes the step on the provider's page: the wallet tells the session that asked,
    # the host's (the command is long gone), and the host sends the same call again, once.
    page.goto(link)
    expect(page.locator("#tool")).to_contain_text("aaif.pwma.request")
    page.click("#confirm-1")
    provider = open_tab(page, page.locator("#go-1").click)
    provider.click("#approve")
    expect(provider.locator("#done")).to_be_visible()
    for _ in range(120):
        page.reload()
        if "succeeded" in page.locator("#status").inner_text():
            break
        page.wait_for_timeout(500)
    expect(page.locator("#status")).to_contain_text("the call ran again and succeeded")
    requests = [c for c in wallet_calls() if c["arguments"].get("requestId") == "req-cli"]
    assert len(requests) == 2  # the first, then once more after the step
    seen = host.query(
        "import json; from mcplet_host.models import AuditEvent as A; from held.models import "
        f"Ceremony as C; c = C.objects.get(token={token!r}); "
        f"e = A.objects.filter(trace_id={trace!r}).order_by('pk'); print(json.dumps(["
        "c.status, [x.event_type for x in e if x.event_type.startswith('mcplet.stepup')], "
        "[x.details.get('via') for x in e if x.event_type == 'mcplet.stepup.completed']]))"
    )
    steps = ["mcplet.stepup.held", "mcplet.stepup.completed", "mcplet.stepup.retried"]
    assert seen == ["executed", steps, ["notification"]]

    # 2. An action: its approval page is the host's, alive after the command exited. Held on a
    # trace that is not a contextId, it still reaches the dashboard's approvals live.
    dashboard = page.context.new_page()  # signed in: the same browser's cookies
    dashboard.goto(f"{host.base}/dashboard/approvals/")
    expect(dashboard.locator("#live")).to_have_attribute("data-state", "live")
    called = host.manage(
        "call_tool", "--agent", "shopping-agent", "--tool", "book_table", "--surface", "app",
        "--trace", "demo-1",
    )  # fmt: skip
    assert called.returncode == 0, called.stderr
    assert "held for an approval of the action book_table" in called.stdout
    row = dashboard.locator(
        '[data-live="approvals"][data-only="pending"] tr', has_text="book_table"
    )
    expect(row).to_contain_text("waiting for approval")  # arrived live: no reload
    dashboard.close()
    link = held_at(called.stdout)
    assert link.startswith(f"{host.base}/passkey/ceremonies/")
    page.goto(link)
    to_its_own_port(page, host.base)  # the host's loopback page, at once
    first = page.url
    expect(page.locator("#approve")).to_be_visible()

    # 3. The host restarts: the approval page closed with it; the host's page opens it again.
    host.stop()
    host.start()
    page.goto(link)
    expect(page.locator("#open")).to_have_text("Open the approval page")
    page.click("#open")
    page.wait_for_url(lambda url: urlparse(url).port not in (host.port, urlparse(first).port))
    page.click("#approve")
    expect(page.locator("#status")).to_contain_text("Approved")
    wait_until(lambda: host.bistro("book_table"), "book_table to run", timeout=60)
    assert len(host.bistro("book_table")) == 1
    assert page.problems == [], page.problems
    assert "Traceback" not in host.log()
