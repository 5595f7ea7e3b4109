"""`manage.py runhost`, the embedded default behind `make run`, starts and serves."""

import os
import subprocess
import sys
import time
import urllib.request

from tests.processes import ROOT, free_port

MANAGE = [sys.executable, "manage.py"]


def embedded(tmp_path, **extra):
    """The embedded default's environment: no DATABASE_URL, REDIS_URL or passkey origin."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "PASSKEY_ORIGIN", "MCPLET_PORT")
    }
    env.update(SECRET_KEY="runhost-test", MCPLET_VAR_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    return env | extra


def test_runhost_serves_health_admin_and_prints_the_walkthrough(tmp_path):
    # Its own backing service, as a second host on one machine has: RESTAURANT_API_URL moves
    # the service runhost starts (no --restaurant-port), the seeded MCPlets and the script.
    port, restaurant = free_port(), free_port()
    env = embedded(tmp_path, RESTAURANT_API_URL=f"http://127.0.0.1:{restaurant}")
    manage = MANAGE
    subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=180)
    seed = [*manage, "seed_reference"]
    subprocess.run(seed, cwd=ROOT, env=env, check=True, timeout=180, capture_output=True)
    log = (tmp_path / "runhost.log").open("w")
    host = subprocess.Popen(
        [*manage, "runhost", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline, health = time.monotonic() + 60, None
        while health is None and time.monotonic() < deadline:
            assert host.poll() is None, (tmp_path / "runhost.log").read_text()
            try:
                with urllib.request.urlopen(f"http://localhost:{port}/healthz", timeout=2) as r:
                    health = r.status
            except OSError:
                time.sleep(0.3)
        assert health == 200
        with urllib.request.urlopen(f"http://localhost:{port}/admin/login/", timeout=5) as r:
            assert r.status == 200
        output = (tmp_path / "runhost.log").read_text()
        assert "worker, beat, watcher, embedded (in-memory broker)" in output
        assert f"restaurant backing service: http://127.0.0.1:{restaurant}" in output
        with urllib.request.urlopen(f"http://127.0.0.1:{restaurant}/healthz", timeout=5) as r:
            assert r.status == 200
        # `make run` seeds the scenario: the demo's steps follow, with this host's addresses.
        assert "Try the reference scenario" in output
        assert f"Register a passkey: http://localhost:{port}/passkey/register/" in output
        assert 'press "Run Director now" for director' in output
        assert f"{tmp_path}/outbox/*.eml" in output
    finally:
        host.terminate()
        host.wait(20)


def test_runhost_refuses_a_passkey_origin_it_does_not_serve(tmp_path):
    """Localhost mode: passkeys are registered on the host's own page, at PASSKEY_ORIGIN."""
    port = free_port()
    result = subprocess.run(
        [*MANAGE, "runhost", f"--port={port}", "--restaurant-port", "0"],
        cwd=ROOT,
        env=embedded(tmp_path, PASSKEY_ORIGIN="http://localhost:8000"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert (
        f"PASSKEY_ORIGIN is http://localhost:8000, but this host serves http://localhost:{port}"
    ) in result.stderr
