"""Bugs the fault harness found, each replayed from what its seed did."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from mcplet_host import gateway
from mcplet_host.celery import enqueue
from passkey.models import Ceremony
from tests.processes import celery_worker, wait_until

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
