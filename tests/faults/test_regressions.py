"""Bugs the fault harness found, each replayed from what its seed did."""

import collections
import re
import sys
from datetime import timedelta

import pytest
from celery import Celery
from django.db import connection
from django.utils import timezone
from kombu import Connection

from held.models import Ceremony
from mcplet_host import gateway
from mcplet_host.celery import app, enqueue
from tests.faults.harness import Service, Supervisor
from tests.processes import celery_worker, environment, free_port, wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


RESUME = "mcplet_host.resume_call"


def overdue_call(registry):
    ceremony = gateway.call_tool(registry["planning"], "approve_plan", {}, "model").ceremony
    Ceremony.objects.filter(pk=ceremony.pk).update(expires_at=timezone.now() - timedelta(1))
    return ceremony


def expired(ceremony):
    ceremony.refresh_from_db()
    return ceremony.status == Ceremony.Status.EXPIRED


def idle(log, resumes):
    """Every task the worker received has ended, and so have the `resumes` an expiry queued
    (queued in its commit, they may not be received yet when the expiry has ended)."""
    text = log.read_text()
    ended = re.findall(r"Task ([\w.]+)\[[^\]]*\] (?:succeeded in|raised)", text)
    return text.count("] received") == len(ended) and ended.count(RESUME) == resumes


def test_seed_107_a_worker_outlives_its_terminated_database_connection(registry, tmp_path):
    """Seed 107 (pg_terminate_backend): the workers kept their connections across tasks
    (CELERY_DB_REUSE_MAX) and failed every later task with 'the connection is closed'."""
    first, second = overdue_call(registry), overdue_call(registry)
    log = tmp_path / "worker.log"
    with celery_worker(log, concurrency=1, DB_CONN_MAX_AGE="600"):
        enqueue("mcplet_host.expire_ceremonies", [])
        wait_until(lambda: expired(first) and expired(second), "the first expiry")
        # A task the termination cuts mid-commit fails by design (recover_calls queues it
        # again); what seed 107 broke was the tasks after it, so terminate between tasks.
        wait_until(lambda: idle(log, resumes=2), "the resumes the first expiry queued")
        third = overdue_call(registry)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            assert cursor.fetchone() is not None
        enqueue("mcplet_host.expire_ceremonies", [])
        wait_until(lambda: expired(third), "the expiry after the connection was terminated")
    text = log.read_text()
    assert "connection is closed" not in text and "administrator command" not in text


def private_redis(tmp_path):
    """A redis-server of the test's own (never the machine's shared one), keeping nothing on
    disk: killed and started again, it comes back empty."""
    port = free_port()
    redis = Service(
        "redis",
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
        tmp_path / "redis.log",
        environment(),
        port,
    )
    return redis, f"redis://127.0.0.1:{port}/0"


def test_seed_1086_a_worker_serves_again_after_its_broker_came_back_empty(tmp_path):
    """Seed 1086 (Redis restarted, its data lost): both workers held a task when the broker
    went; Celery's reconnect failed in kombu (an AttributeError in `_connparams`), each worker
    ended with code 1 once its task was done, and nothing started it again — approved calls
    waited forever. Under a supervisor (compose's `restart: unless-stopped`) a worker serves
    the next task."""
    redis, url = private_redis(tmp_path)
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


RUNHOST = (
    "import os, sys; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'mcplet_host.settings'); "
    "import django; django.setup(); import tests.faults.slow; "
    "from django.core.management import call_command; "
    "call_command('runhost', '--port', sys.argv[1], '--restaurant-port', '0')"
)


def test_seed_1086_runhost_exits_when_its_worker_thread_ends(tmp_path):
    """Seed 1086 under `manage.py runhost` with REDIS_URL: the broker came back empty while the
    in-process worker held a task, the worker thread ended — and the web went on serving from a
    host that would never run an approved call again. The whole process exits instead, with the
    worker's code, so that its supervisor starts it again. Whether kombu's reconnect fails
    depends on timing, so the worker is ended here the way that always works: a remote
    `shutdown`, which ends it by itself just the same."""
    redis, url = private_redis(tmp_path)
    port = free_port()
    host = Service(
        "runhost",
        [sys.executable, "-c", RUNHOST, str(port)],
        tmp_path / "runhost.log",
        environment(REDIS_URL=url, PASSKEY_ORIGIN=f"http://localhost:{port}"),
        port,
    )
    redis.start()
    host.start()
    try:
        control = Celery(broker=url).control  # a bare app: the test's own routes elsewhere
        wait_until(lambda: control.ping(timeout=1), "the worker to answer")
        control.shutdown()
        wait_until(lambda: host.process.poll() is not None, "runhost to exit", timeout=90)
    finally:
        host.stop()
        redis.stop()
    assert host.process.returncode != 0
    assert "the Celery worker stopped" in host.log.read_text()
