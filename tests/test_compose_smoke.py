"""docker-compose.yml without Docker: run the `command` of its migrate, web, worker and beat
services exactly as written, as separate processes, against the real PostgreSQL and Redis."""

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import psycopg
import pytest
import yaml
from django.conf import settings
from django.core.cache import cache

from mcplet_host.tasks import HEARTBEAT_KEY

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parents[1]
INTERPOLATION = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def interpolate(value, env):
    """Compose's ${VAR} / ${VAR:-default} substitution."""
    return INTERPOLATION.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), value)


def run(command, env):
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout, what, procs):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        for name, proc in procs.items():
            if proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode} while waiting for {what}")
        time.sleep(0.25)
    pytest.fail(f"timed out waiting for {what}")


@pytest.fixture
def smoke_database():
    db = settings.DATABASES["default"]
    name = f"mcplet_smoke_{uuid.uuid4().hex[:8]}"
    admin = dict(
        host=db["HOST"],
        port=db["PORT"] or 5432,
        user=db["USER"],
        password=db["PASSWORD"],
        dbname="postgres",
        autocommit=True,
    )
    with psycopg.connect(**admin) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 5432}/{name}"
    yield url
    with psycopg.connect(**admin) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_compose_services_run_together(smoke_database, tmp_path):
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    port = free_port()
    web = services["web"]["environment"].items()
    env = {k: interpolate(str(v), {}) for k, v in web if v is not None}  # None: passed through
    env.update(
        os.environ,
        WEB_PORT=str(port),
        DATABASE_URL=smoke_database,
        REDIS_URL=settings.REDIS_URL,
        SECRET_KEY="compose-smoke",
        MCPLET_VAR_DIR=str(tmp_path),
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"),  # compose's is the container's
        PASSKEY_MODE="localhost",
        PASSKEY_ORIGIN=f"http://localhost:{port}",
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    )
    command = {
        name: [interpolate(part, env) for part in services[name]["command"]]
        for name in ("migrate", "web", "worker", "beat")
    }

    run(command["migrate"], env)
    marker = f"smoke-{uuid.uuid4().hex[:8]}"
    run(  # a schedule that exists only in this database: beat must read it there
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            "from django_celery_beat.models import IntervalSchedule, PeriodicTask\n"
            "every, _ = IntervalSchedule.objects.get_or_create(every=1, period='seconds')\n"
            f"PeriodicTask.objects.create(name='{marker}', task='mcplet_host.heartbeat', "
            f"interval=every, args='[\"{marker}\"]')",
        ],
        env,
    )

    procs = {}
    try:
        for name in ("web", "worker", "beat"):
            procs[name] = subprocess.Popen(
                command[name],
                cwd=ROOT,
                env=env,
                stdout=(tmp_path / f"{name}.log").open("w"),
                stderr=subprocess.STDOUT,
            )

        def healthz():
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/healthz", timeout=2
                ) as response:
                    return response.status == 200 and response.read()
            except OSError:
                return None

        assert b'"status": "up"' in wait_for(healthz, 60, "/healthz to answer 200", procs)

        roundtrip = f"roundtrip-{uuid.uuid4().hex[:8]}"
        from mcplet_host.celery import app

        app.send_task("mcplet_host.heartbeat", args=[roundtrip])
        wait_for(
            lambda: cache.get(f"{HEARTBEAT_KEY}:{roundtrip}"),
            60,
            "a task round trip through Redis",
            procs,
        )
        wait_for(
            lambda: cache.get(f"{HEARTBEAT_KEY}:{marker}"),
            60,
            "beat to send the database schedule",
            procs,
        )
    except BaseException:
        for name in procs:
            print(f"--- {name} ---\n{(tmp_path / f'{name}.log').read_text()[-3000:]}")
        raise
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
