"""Bugs the fault harness found, each replayed from what its seed did."""

import collections
import sys
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from kombu import Connection

from mcplet_host import gateway
from mcplet_host.celery import app, enqueue
from passkey.models import Ceremony
from tests.faults.harness import Service, Supervisor
from tests.processes import celery_worker, environment, free_port, wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def overdue_call(registry):
    ceremony = gateway.call_tool(registry["planning"], "approve_plan", {}, "model").ceremony
    Ceremony.objects.filter(pk=ceremony.pk).update(expires_at=timezone.now() - timedelta(1))
    return ceremony


def expired(ceremony):
    ceremony.refresh_from_db()
    return ceremony.status == Ceremony.Status.EXPIRED


def test_seed_107_a_worker_outlives_its_terminated_database_connection(registry, tmp_path):
    """Seed 107 (pg_terminate_backend): the workers kept their connections across tasks
    (CELERY_DB_REUSE_MAX) and failed every later task with 'the connection is closed'."""
    first, second = overdue_call(registry), overdue_call(registry)
    with celery_worker(tmp_path / "worker.log", concurrency=1, DB_CONN_MAX_AGE="600"):
        enqueue("mcplet_host.expire_ceremonies", [])
        wait_until(lambda: expired(first) and expired(second), "the first expiry")
        third = overdue_call(registry)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            assert cursor.fetchone() is not None
        enqueue("mcplet_host.expire_ceremonies", [])
        wait_until(lambda: expired(third), "the expiry after the connection was terminated")
    log = (tmp_path / "worker.log").read_text()
    assert "connection is closed" not in log and "administrator command" not in log


def test_seed_1086_a_worker_serves_again_after_its_broker_came_back_empty(tmp_path):
    """Seed 1086 (Redis restarted, its data lost): both workers held a task when the broker
    went; Celery's reconnect failed in kombu (an AttributeError in `_connparams`), each worker
    ended with code 1 once its task was done, and nothing started it again — approved calls
    waited forever. Under a supervisor (compose's `restart: unless-stopped`) a worker serves
    the next task."""
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    redis = Service(
        "redis",
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
        tmp_path / "redis.log",
        environment(),
        port,
    )
    worker = Service(
        "worker",
        [sys.executable, "-m", "celery", "-A", "mcplet_host", "worker", "-P", "threads"]
        + ["-c", "2", "--without-mingle", "--without-gossip", "-I", "tests.faults.slow"]
        + ["--loglevel", "INFO", "-n", "w@%h"],
        tmp_path / "worker.log",
        environment(REDIS_URL=url),
        ready="ready.",
    )
    first, second = tmp_path / "first", tmp_path / "second"
    redis.start()
    worker.start()
    supervisor = Supervisor([redis, worker], collections.Counter()).start()
    try:
        with Connection(url) as broker:
            app.send_task("tests.faults.slow.hold", [str(first), 2], connection=broker)
        wait_until(lambda: "received" in worker.log.read_text(), "the worker to take the task")
        redis.kill()
        redis.start()  # empty
        with Connection(url) as broker:
            app.send_task("tests.faults.slow.hold", [str(second), 0], connection=broker)
        wait_until(second.exists, "the next task after the broker came back empty")
    finally:
        supervisor.stop()
        worker.stop()
        redis.stop()
    assert first.exists()
