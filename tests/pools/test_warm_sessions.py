"""No cold calls: a worker opens its sessions to the enabled MCP servers as it starts — a
stdio server is running before any call — and leaves the disabled ones alone. Its stdio
servers are launched one after another, not all at once."""

import sys
from pathlib import Path

import pytest

from pools.mcp_client import ServerConfig, ServerUnreachable
from pools.models import McpServer
from pools.sessions import sessions
from tests.pools.conftest import tool
from tests.processes import celery_worker, wait_until

HANGS = "import time; time.sleep(60)"  # a server that never answers `initialize`

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def running(spec_path):
    """The processes whose command line names `spec_path` (a server launched for it)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(spec_path).encode() in command:
            found.append(int(proc.name))
    return found


def test_a_worker_launches_the_enabled_servers_as_it_starts(spec, tmp_path):
    enabled, disabled = spec([tool("lookup")], "crm"), spec([tool("other")], "erp")
    enabled.stdio()
    off = disabled.stdio()
    off.enabled = False
    off.save()
    assert running(enabled.path) == []
    with celery_worker(tmp_path / "worker.log"):
        wait_until(lambda: running(enabled.path), "the worker to launch the enabled server")
        assert running(disabled.path) == []
        assert enabled.calls() == []  # launched, and nothing called
    wait_until(lambda: not running(enabled.path), "the server to end with its worker")


def test_stdio_servers_are_launched_one_after_another(spec):
    """Each launch is an interpreter starting: the next server starts only once the one before
    it answers (launched all at once, they would start together, none ready yet)."""
    servers = [spec([tool(f"lookup_{i}")], f"crm{i}") for i in range(3)]
    configs = [ServerConfig.of(server.stdio()) for server in servers]
    try:
        sessions.warm(configs, timeout=30)
        for before, server in zip(configs, servers[1:], strict=False):
            wait_until(lambda s=server: running(s.path), f"{server.name} to be launched")
            held = sessions._held.get(before.id)
            assert held is not None and held.ready.done(), "launched before the last one answered"
        wait_until(lambda: sessions._held[configs[-1].id].ready.done(), "the last to answer")
        assert all(server.calls() == [] for server in servers)  # launched, nothing called
    finally:
        sessions.close_all()


def test_a_server_that_hangs_as_it_starts_holds_the_next_launch_back_no_longer_than_its_turn(
    spec, monkeypatch
):
    """A launch has its turn, then the next starts beside it; closing the pool ends the one
    that still hangs at once, and whoever waits for it is told it is unreachable."""
    monkeypatch.setattr("pools.sessions.LAUNCH_TURN", 0.5)
    hangs = McpServer.objects.create(
        name="hangs", transport="stdio", command=sys.executable, args=["-c", HANGS]
    )
    server = spec([tool("lookup")], "crm")
    configs = [ServerConfig.of(hangs), ServerConfig.of(server.stdio())]
    try:
        sessions.warm(configs, timeout=30)
        wait_until(lambda: configs[1].id in sessions._held, "the next launch", timeout=5)
        wait_until(lambda: sessions._held[configs[1].id].ready.done(), "it to answer")
        hanging = sessions._held[configs[0].id]
        assert not hanging.ready.done()  # the first one still hangs
    finally:
        sessions.close_all()
    assert isinstance(hanging.ready.exception(), ServerUnreachable)
    assert running(HANGS) == []
