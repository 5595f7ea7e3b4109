"""The Director on real Celery workers and Redis: never two cycles at once, and a crashed
worker does not block the schedule longer than the lock's expiry."""

import signal

import pytest
import redis
from django.conf import settings

from a2a.models import A2AMessage
from agents import director as directors
from mcplet_host.celery import enqueue
from mcplet_host.models import AuditEvent
from tests.agents.test_director import INSTRUCTION
from tests.processes import celery_worker, wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def cycles(outcome):
    return AuditEvent.objects.filter(event_type=f"director.cycle.{outcome}").count()


def test_ten_concurrent_triggers_run_one_cycle(director, script, tmp_path):
    director.model = script({"director": [{"delay": 3, "json": INSTRUCTION}]})
    director.save()
    with celery_worker(tmp_path / "worker.log", concurrency=10, MCPLET_SCRIPT_DIRS=str(tmp_path)):
        for _ in range(10):
            enqueue("agents.run_director", ["director"])
        wait_until(lambda: cycles("ran") + cycles("skipped") == 10, "all ten triggers")
    assert (cycles("ran"), cycles("skipped")) == (1, 9)
    assert A2AMessage.objects.filter(sender_id="director").count() == 1


def test_a_worker_killed_mid_cycle_blocks_the_schedule_only_until_the_lock_expires(
    director, script, tmp_path
):
    director.lock_timeout = 3
    director.model = script({"director": [{"delay": 60, "json": INSTRUCTION}]}, name="slow")
    director.save()
    lock = f"mcplet:lock:director:{director.agent_id}"
    client = redis.Redis.from_url(settings.REDIS_URL)
    with celery_worker(tmp_path / "worker.log", MCPLET_SCRIPT_DIRS=str(tmp_path)) as worker:
        enqueue("agents.run_director", ["director"])
        wait_until(lambda: client.exists(lock), "the cycle to take its lock")
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)

    assert directors.run_cycle("director").outcome == "skipped"  # the dead cycle's lock is alive
    wait_until(lambda: not client.exists(lock), "the lock to expire", timeout=10)
    director.model = script({"director": [{"json": INSTRUCTION}]}, name="fast")
    director.save()
    assert directors.run_cycle("director").outcome == "ran"
    assert A2AMessage.objects.filter(sender_id="director").count() == 1
