"""`manage.py serve` as compose's `web` runs it: MCPLET_WEB_PROCESSES=2 uvicorn worker processes
on the test database and the real Redis. Each process answers HTTP (health, admin) and the
dashboard's websocket, and an event recorded anywhere reaches the sockets of both (the Redis
channel layer). Which process holds a connection is read from /proc (Linux)."""

import contextlib
import copy
import http.client
import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from websockets.sync.client import connect

from mcplet_host import audit
from mcplet_host.management.commands.serve import WEB_DB_POOL
from tests.processes import ROOT, environment, free_port, stop, wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

NAMESPACE = f"serve-{os.getpid()}"
ATTEMPTS = 24  # connections opened, at most, until both processes have answered one


def worker_pids(parent):
    """uvicorn's worker processes under `parent` (spawned children; not the resource tracker)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"spawn_main" in cmdline:
            found.add(int(entry.name))
    return found


def running(pid):
    """Not ended (a zombie, waiting for whoever adopted it to reap it, has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def serving_pid(server_port, client_port, pids):
    """The process holding the server's end of the connection from `client_port`."""
    wanted = (f"{server_port:04X}", f"{client_port:04X}")
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote = fields[1].rsplit(":", 1)[1], fields[2].rsplit(":", 1)[1]
            if (local, remote) == wanted:
                inodes.add(f"socket:[{fields[9]}]")
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                if os.readlink(fd) in inodes:
                    return pid
            except OSError:
                continue
    return None


@pytest.fixture(scope="module")
def served(django_db_setup, django_db_blocker, tmp_path_factory):
    """(supervisor process, port, its two worker pids)."""
    port, log = free_port(), tmp_path_factory.mktemp("serve") / "serve.log"
    env = environment(
        DJANGO_SETTINGS_MODULE="tests.settings",
        MCPLET_TEST_NAMESPACE=NAMESPACE,
        MCPLET_WEB_PROCESSES="2",
    )
    with django_db_blocker.unblock(), log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(lambda: len(worker_pids(process.pid)) == 2, "two workers", process)
            wait_until(  # logged once a worker has loaded the application
                lambda: log.read_text().count("Started server process") == 2,
                "the workers to load the application",
                process,
            )
            yield process, port, worker_pids(process.pid)
        except BaseException:
            print(log.read_text()[-3000:])
            raise
        finally:
            stop(process)


@pytest.fixture
def session_cookie(django_user_model):
    """A signed-in superuser "operator"'s session cookie (sessions are in the database)."""
    staff = django_user_model.objects.create_superuser("operator", "op@example.org", "pw-op-1")
    client = Client()
    client.force_login(staff)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def test_both_processes_answer_health_and_admin(served, session_cookie):
    _, port, pids = served
    answered = set()
    for _ in range(ATTEMPTS):
        conn = http.client.HTTPConnection("localhost", port, timeout=30)
        try:
            conn.connect()
            conn.request("GET", "/healthz")
            health = conn.getresponse()
            assert (health.status, b'"status": "up"' in health.read()) == (200, True)
            pid = serving_pid(port, conn.sock.getsockname()[1], pids)  # accepted by now
            conn.request("GET", "/admin/", headers={"Cookie": session_cookie})
            admin = conn.getresponse()
            assert (admin.status, b"Operate pools, servers, agents" in admin.read()) == (200, True)
        finally:
            conn.close()
        answered.add(pid)
        if answered == pids:
            break
    assert answered == pids


def test_both_processes_serve_the_live_stream(served, session_cookie, settings):
    _, port, pids = served
    sockets, holders = [], set()
    with contextlib.ExitStack() as opened:
        for _ in range(ATTEMPTS):
            ws = opened.enter_context(
                connect(
                    f"ws://localhost:{port}/ws/dashboard/",
                    origin=f"http://localhost:{port}",
                    additional_headers={"Cookie": session_cookie},
                    open_timeout=30,
                )
            )
            sockets.append(ws)
            assert json.loads(ws.recv(timeout=30)) == {"type": "hello", "user": "operator"}
            holders.add(serving_pid(port, ws.socket.getsockname()[1], pids))
            if holders == pids:
                break
        assert holders == pids

        # An event recorded in this process reaches every socket, whichever process holds it.
        layers = copy.deepcopy(settings.CHANNEL_LAYERS)
        layers["default"]["CONFIG"]["prefix"] = f"mcplet:channels:{NAMESPACE}"
        settings.CHANNEL_LAYERS = layers
        trace = str(uuid.uuid4())
        audit.record("TOOL_EXECUTED", actor_type="agent", actor_id="info",
                     target_tool="query_crm", trace_id=trace)  # fmt: skip
        for ws in sockets:
            while trace not in (message := ws.recv(timeout=30)):
                pass  # another event on this prefix (none expected): skipped
            assert json.loads(message)["type"] == "audit"


def web_connections():
    """(backend pid, start) of each connection to the test database but this process's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, backend_start FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return set(cursor.fetchall())


def test_each_process_keeps_a_pool_of_database_connections(served, session_cookie):
    """Each request's sync code runs on a thread of its own: without the pool `serve` turns on,
    every request would connect to PostgreSQL anew and close the connection at its end."""
    _, port, pids = served

    def pages(n):
        for _ in range(n):
            conn = http.client.HTTPConnection("localhost", port, timeout=30)
            try:  # the admin's index reads the session and the user: the database each time
                conn.request("GET", "/admin/", headers={"Cookie": session_cookie})
                assert conn.getresponse().status == 200
            finally:
                conn.close()

    pages(2 * ATTEMPTS)
    kept = web_connections()
    assert 1 <= len(kept) <= len(pids) * WEB_DB_POOL  # open between requests, and bounded
    pages(2 * ATTEMPTS)
    assert web_connections() == kept  # the same connections served them: none opened anew


def test_the_workers_end_with_a_killed_supervisor(served):
    """SIGKILL leaves uvicorn's supervisor no time to stop its workers: they stop themselves,
    so nothing keeps serving on the port (a supervisor started again can bind it)."""
    process, port, pids = served
    process.kill()
    process.wait()
    wait_until(lambda: not any(map(running, pids)), "the workers to stop")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)


def test_several_processes_need_redis():
    """Without REDIS_URL each process would keep its own cache (passkey challenges), channel
    layer and broker: refused before anything listens."""
    result = subprocess.run(
        [sys.executable, "manage.py", "serve", "--port", str(free_port())],
        cwd=ROOT,
        env={**environment(MCPLET_WEB_PROCESSES="2"), "REDIS_URL": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "2 web processes need REDIS_URL" in result.stderr
