"""A worker's kept database connection at each task (mcplet_host.celery): checked with a round
trip only when it is not quiet — and one the server terminated is always replaced."""

import psycopg
import pytest
from django.db import connection, connections

from agents.models import Agent
from mcplet_host.celery import check_database_connections, quiet

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def checks(monkeypatch):
    """Each time Django asks whether the connection is usable (its `SELECT 1`), and its answer."""
    wrapper = type(connections["default"])
    answers, real = [], wrapper.is_usable

    def is_usable(self):
        answers.append(real(self))
        return answers[-1]

    monkeypatch.setattr(wrapper, "is_usable", is_usable)
    return answers


@pytest.fixture
def kept(monkeypatch):
    """The connection as a worker keeps it (DB_CONN_MAX_AGE), opened afresh."""
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 600)
    connection.close()
    connection.ensure_connection()
    yield
    connection.close()


def a_task():
    check_database_connections()  # the worker's task_prerun
    return Agent.objects.count()  # the task's first statement


def test_a_quiet_kept_connection_takes_no_round_trip_to_be_checked(kept, checks):
    if connection.vendor == "postgresql":
        pid = connection.connection.info.backend_pid
        assert a_task() == 0
        assert checks == []  # Django's check would have made a `SELECT 1` of its own
        assert connection.connection.info.backend_pid == pid  # kept
    else:
        assert not quiet(connection.connection)  # not a PostgreSQL connection: Django decides


def test_a_connection_in_a_transaction_is_not_quiet():
    connection.ensure_connection()
    if connection.vendor == "postgresql":
        assert quiet(connection.connection)
        with connection.cursor() as cursor:
            connection.connection.execute("BEGIN")
            assert not quiet(connection.connection)
            cursor.execute("ROLLBACK")
    assert not quiet(None)


def test_a_connection_the_server_terminated_is_replaced_before_the_task_uses_it(kept, checks):
    if connection.vendor != "postgresql":
        assert a_task() == 0
        return
    pid = connection.connection.info.backend_pid
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as admin:
        # Its second argument: wait until the backend is gone.
        terminated = admin.execute("SELECT pg_terminate_backend(%s, 10000)", [pid]).fetchone()
    assert terminated == (True,)
    assert not quiet(connection.connection)  # its error and its end wait on the socket
    assert a_task() == 0  # not "terminating connection due to administrator command"
    assert checks == [False]  # Django's check found it broken, and it was replaced
    assert connection.connection.info.backend_pid != pid
