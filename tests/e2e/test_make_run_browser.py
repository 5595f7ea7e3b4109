"""`make run PORT=<any port>` walked through in Chromium as the README's Walkthrough says: the
embedded default (SQLite under a fresh MCPLET_VAR_DIR, the in-memory broker, one `runhost`
process after migrate, seed_reference and ensure_admin, exactly as the Makefile runs them), with
no passkey origin configured: the host serves approvals from the port it runs on, and the mail
MCPlet verifies with it there. Ten e-mails end in the outbox."""

import json
import os
import re
import subprocess
import sys
import uuid

import httpx
import pytest
from playwright.sync_api import expect

from tests.dashboard.conftest import sign_in
from tests.e2e.walkthrough import (
    approve_the_emails,
    approve_the_plan,
    reference_scripts,
    register_passkey,
    run_director,
)
from tests.processes import ROOT, free_port, stop, wait_until
from tests.restaurant.conftest import sent_mail
from tests.restaurant.test_reference_script import at_risk

expect.set_options(timeout=60_000)  # the agents and MCP servers, not a page's render

# What a new operator's shell passes on: nothing of the host's configuration.
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH")


def make(env, *args):
    """One of the Makefile's `$(BIN)/python manage.py …` steps; its output."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def make_run(tmp_path_factory):
    """`make run PORT=<port>`: migrate, seed once, ensure_admin, runhost --port; yields the
    host's address, the admin password it printed and the var directory."""
    var = tmp_path_factory.mktemp("var")
    restaurant = free_port()
    env = {name: os.environ[name] for name in INHERITED if name in os.environ}
    env.update(
        SECRET_KEY="make-run-test",
        MCPLET_VAR_DIR=str(var),
        PYTHONUNBUFFERED="1",
        # The test's own backing service port (5100 may be taken), as seed_reference reads it.
        RESTAURANT_API_URL=f"http://127.0.0.1:{restaurant}",
        MCPLET_SCRIPT_DIRS=reference_scripts(
            tmp_path_factory.mktemp("scripts"), f"http://127.0.0.1:{restaurant}"
        ),
    )
    make(env, "migrate", "--noinput")
    make(env, "seed_reference")
    password = re.search(r"password: (\S+)", make(env, "ensure_admin")).group(1)
    port = free_port()
    log = var / "runhost.log"
    with log.open("w") as out:
        host = subprocess.Popen(
            [sys.executable, "manage.py", "runhost", "--port", str(port)]
            + ["--restaurant-port", str(restaurant)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: "Try the reference scenario" in log.read_text(), "runhost", host)
        yield f"http://localhost:{port}", password, var, env
    finally:
        stop(host, 20)


def test_the_walkthrough_on_any_port_sends_ten_emails(page, make_run):
    host, password, var, _ = make_run
    guests = at_risk()
    assert len(guests) == 10
    sign_in(page, host, "admin", password)
    register_passkey(page, host)
    run_director(page, host)
    approve_the_plan(page, host, guests)
    approve_the_emails(page, host, guests)
    outbox = var / "outbox"
    wait_until(lambda: len(sent_mail(outbox)) == 10, "ten e-mails in the outbox")
    assert page.problems == []


def test_a_partner_streams_its_task_from_the_embedded_host(make_run):
    """The embedded default has no Redis to announce a task's changes: its stream re-reads the
    task (a2a.events), from the first event to the last."""
    host, _, _, env = make_run
    key = make(env, "create_partner_key", "partner-bot", "--name", "stream").strip()
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"data": {}}]}
    with httpx.stream(
        "POST",
        f"{host}/a2a/v1/info-gathering-agent/message:stream",
        json={"message": message},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = (json.loads(line[6:]) for line in response.iter_lines() if line[:6] == "data: ")
        first = next(events)
        assert first["task"]["contextId"]
        last = first
        for last in events:
            if "statusUpdate" in last and last["statusUpdate"]["status"]["state"] not in (
                "TASK_STATE_SUBMITTED",
                "TASK_STATE_WORKING",
            ):
                break
    assert "statusUpdate" in last, last  # the stream went on past its first event
