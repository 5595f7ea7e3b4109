"""No cold calls: a worker opens its sessions to the enabled MCP servers as it starts — a
stdio server is running before any call — and leaves the disabled ones alone."""

from pathlib import Path

import pytest

from tests.pools.conftest import tool
from tests.processes import celery_worker, wait_until

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
