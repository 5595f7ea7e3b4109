"""The a2a-sdk as our peer: its own virtualenv (var/a2a-sdk, created from the package registry
on first use and reused), never imported by the host or the tests (its top-level package is
`a2a`, like ours). Its scripts here run as subprocesses of the tests."""

import fcntl
import json
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import httpx

from a2a import outbound
from tests.processes import ROOT, free_port, stop, wait_until

VERSION = "1.3.0"
REQUIREMENTS = [f"a2a-sdk[http-server]=={VERSION}", "uvicorn==0.54.0"]
VENV = ROOT / "var" / "a2a-sdk"
PYTHON = VENV / "bin" / "python"
HERE = Path(__file__).resolve().parent


def python():
    """The SDK's interpreter, installing it the first time (a marker says it is complete).
    Run it with -I: our PYTHONPATH would put our `a2a` before the SDK's."""
    marker = VENV / "installed.json"
    VENV.parent.mkdir(exist_ok=True)
    with open(VENV.parent / "a2a-sdk.lock", "w") as lock:  # xdist workers install it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists() or json.loads(marker.read_text()) != REQUIREMENTS:
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
            subprocess.run(
                [str(PYTHON), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
                + REQUIREMENTS,
                check=True,
                timeout=600,
            )
            marker.write_text(json.dumps(REQUIREMENTS))
    return str(PYTHON)


class Client:
    """tests/a2a_sdk/client.py, running: `call` sends one command and returns its results."""

    def __init__(self):
        self.process = subprocess.Popen(
            [python(), "-I", str(HERE / "client.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def start(self, **command):
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def events(self):
        """The results of the command started, as they arrive (up to its end)."""
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("the SDK client exited")
            result = json.loads(line)
            if result == {"end": True}:
                return
            yield result

    def call(self, **command):
        self.start(**command)
        return list(self.events())

    def close(self):
        self.process.stdin.close()
        stop(self.process)


@contextmanager
def server(token):
    """tests/a2a_sdk/server.py, a remote agent answering `Authorization: Bearer <token>`,
    serving; yields its base URL."""
    port = free_port()
    process = subprocess.Popen(
        [python(), "-I", str(HERE / "server.py"), str(port), token], stdout=subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}"

    def serving():
        try:
            return bool(outbound.fetch_card(base, {}))
        except outbound.RemoteError:
            return False

    try:
        wait_until(serving, "the SDK server", process)
        yield base
    finally:
        stop(process)


@contextmanager
def receiver(authorization, token, failures=0):
    """tests/a2a_sdk/receiver.py, a webhook taking `authorization` and `token`, serving;
    yields (its URL, a function giving what it received)."""
    port = free_port()
    process = subprocess.Popen(
        [python(), "-I", str(HERE / "receiver.py"), str(port), authorization, token, str(failures)],
        stdout=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"

    def received():
        return httpx.get(f"{base}/received", timeout=5).json()

    def serving():
        try:
            return received() == []
        except httpx.HTTPError:
            return False

    try:
        wait_until(serving, "the webhook", process)
        yield f"{base}/hook", received
    finally:
        stop(process)
