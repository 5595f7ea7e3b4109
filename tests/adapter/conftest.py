"""Third-party MCP servers for the adapter's tests, installed from the package registries with
their ordinary clients into a git-ignored cache (var/third-party/), once per machine; a lock
keeps two test workers from installing at the same time. Not written by us: the reference
filesystem server (npm, run by the machine's node) and the reference time server (PyPI, in a
virtualenv of its own, since it brings the 1.x `mcp` SDK)."""

import contextlib
import fcntl
import json
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from django.conf import settings
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from mcplets.examples.programmable import SOURCE_ROOT
from tests.passkey.conftest import (  # noqa: F401 (the passkey tests' fixtures, for the host's)
    _close_loopback_pages,
    approver,
    approver_client,
    authenticator,
    passkey_settings,
)

FILESYSTEM = "@modelcontextprotocol/server-filesystem@2026.8.31"
TIME = "mcp-server-time==2026.10.19"
EXAMPLES = SOURCE_ROOT / "mcplets" / "adapter" / "examples"


def cache_dir():
    path = Path(settings.VAR_DIR) / "third-party"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def installing(name):
    """The install folder `name`, installed by the body unless a previous run finished."""
    root = cache_dir()
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / name / ".installed"
        if done.exists():
            yield root / name, False
            return
        yield root / name, True
        done.write_text("ok\n")


def run(command):
    if shutil.which(command[0]) is None:
        pytest.fail(f"the adapter's tests install third-party MCP servers with {command[0]}")
    finished = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, f"{command} failed:\n{finished.stdout}\n{finished.stderr}"


@pytest.fixture(scope="session")
def filesystem_bin():
    """The filesystem server's executable (a node script)."""
    with installing("npm-" + FILESYSTEM.replace("/", "+")) as (folder, needed):
        if needed:
            folder.mkdir(exist_ok=True)
            run(["npm", "install", "--prefix", str(folder), "--no-audit", "--no-fund", FILESYSTEM])
    return str(folder / "node_modules" / ".bin" / "mcp-server-filesystem")


@pytest.fixture(scope="session")
def time_bin():
    with installing("pypi-" + TIME.replace("==", "-")) as (folder, needed):
        if needed:
            run([sys.executable, "-m", "venv", "--clear", str(folder)])
            run([str(folder / "bin" / "pip"), "install", "--quiet", TIME])
    return str(folder / "bin" / "mcp-server-time")


@pytest.fixture
def shared(tmp_path):
    """The filesystem server's one allowed folder."""
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "menu.txt").write_text("Tonight: ramen, gyoza\n")
    return folder.resolve()


def adapter_args(config, *upstream):
    return ["-m", "mcplets.adapt", str(config), "--", *upstream]


def suggested_draft(path, *upstream):
    """`python -m mcplets.adapt --suggest` for UPSTREAM, written to `path`."""
    command = [sys.executable, "-m", "mcplets.adapt", "--suggest", "-o", str(path), "--"]
    subprocess.run([*command, *upstream], cwd=SOURCE_ROOT, check=True, timeout=60)
    return path


@contextlib.asynccontextmanager
async def adapter_session(config, *upstream, env=None, message_handler=None):
    """A client session to `python -m mcplets.adapt CONFIG -- UPSTREAM...` over stdio."""
    params = StdioServerParameters(
        command=sys.executable, args=adapter_args(config, *upstream), env=env, cwd=SOURCE_ROOT
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, message_handler=message_handler) as session,
    ):
        with anyio.fail_after(30):
            await session.initialize()
        yield session


def write_config(path, tools, server="test-adapter"):
    path.write_text(json.dumps({"server": server, "tools": tools}))
    return path
