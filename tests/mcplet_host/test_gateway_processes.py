"""The gateway across real processes: a rate limit shared through Redis, and an approval that
outlives the worker that was running when the call was held."""

import signal
import subprocess
import sys

import pytest

from held.models import Ceremony
from mcplet_host import gateway
from tests.mcplet_host.test_gateway import ASSERTION
from tests.processes import ROOT, celery_worker, environment, wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

CALLER = """
from agents.models import Agent
from mcplet_host import gateway
agent = Agent.objects.get(agent_id="dispatch-agent")
for _ in range({n}):
    print(gateway.call_tool(agent, "read_site_stats", {{}}).status, flush=True)
"""


def test_the_rate_limit_is_shared_by_two_processes(registry, calls):
    pool = registry["media-pool"]
    pool.rate_limit_per_minute = 5
    pool.save()
    command = [sys.executable, "manage.py", "shell", "--no-imports", "-c", CALLER.format(n=5)]
    processes = [
        subprocess.Popen(command, cwd=ROOT, env=environment(), stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    statuses = [line for p in processes for line in p.communicate(timeout=120)[0].split()]
    assert sorted(statuses) == ["executed"] * 5 + ["refused"] * 5
    assert len(calls("read_site_stats")) == 5


def test_an_approval_survives_the_worker(registry, calls, admin_user, tmp_path):
    with celery_worker(tmp_path / "first.log", "first") as first:
        outcome = gateway.call_tool(
            registry["dispatch"],
            "send_email",
            {"to": ["sato@example.jp"], "body": "Dessert?"},
            "app",
        )
        first.send_signal(signal.SIGKILL)  # the worker dies while the call waits
        first.wait(10)

    ceremony = outcome.ceremony
    assert ceremony.approve(admin_user, assertion=ASSERTION)  # queued: no worker is running
    assert calls() == []

    with celery_worker(tmp_path / "second.log", "second"):
        wait_until(
            lambda: Ceremony.objects.get(pk=ceremony.pk).status == Ceremony.Status.EXECUTED,
            "the restarted worker to run the approved call",
        )
    (call,) = calls("send_email")
    assert call["meta"]["mcplet_auth"] == ASSERTION
