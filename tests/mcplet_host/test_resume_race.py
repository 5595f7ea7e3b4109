"""Two workers resuming the same approved call at once: exactly one tools/call reaches the MCP
server (issue 14: without the row lock in `gateway.resume`, both ran it — a race SQLite cannot
show, so this runs on PostgreSQL).

The race is made certain, not likely: this test holds the ceremony's row lock while both
resumes start, and lets go only once both wait on it. With the lock in `resume`, the second
then finds the call already executing; without it, both read "approved" before either writes."""

import threading
import time

import pytest
from django.db import connection, transaction

from held import lifecycle
from held.models import Ceremony
from mcplet_host import gateway

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def backend_pid():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def waiting_on_a_lock(pids):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s) AND wait_event_type = "
            "'Lock'",
            [list(pids)],
        )
        return cursor.fetchone()[0]


def test_two_workers_resuming_one_approved_call_run_it_once(registry, calls, admin_user):
    # A host-only prepare: no assertion to take, so nothing but the row lock stands between
    # the two workers and a second tools/call.
    ceremony = gateway.call_tool(registry["planning"], "approve_plan", {}, "model").ceremony
    assert ceremony.approve(admin_user)
    pids, errors = set(), []
    ready = threading.Barrier(3)

    def worker():
        try:
            pids.add(backend_pid())
            ready.wait(timeout=10)
            lifecycle.resume(ceremony.pk)
        except Exception as exc:  # reported below, with the call count
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    with transaction.atomic():
        Ceremony.objects.select_for_update().get(pk=ceremony.pk)  # another holder of the row
        for thread in threads:
            thread.start()
        ready.wait(timeout=10)
        deadline = time.monotonic() + 20
        while waiting_on_a_lock(pids) < 2:
            assert time.monotonic() < deadline, "the workers never reached the ceremony's row"
            time.sleep(0.02)
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert len(calls("approve_plan")) == 1
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.EXECUTED
