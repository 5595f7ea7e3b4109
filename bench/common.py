"""What the benchmarks share: Django on a throwaway SQLite file or on PostgreSQL (created if
missing, migrated, the benchmark's tables emptied), a scratch directory, the summary figures of
a list of durations, and a few process helpers.

The scripts are run as `python bench/<name>.py`, and some are also imported as `bench.<name>`
by the worker subprocesses they start; so they put the repository root on sys.path and import
this module as `bench.common` either way.
"""

import contextlib
import cProfile
import functools
import io
import itertools
import logging
import math
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# One INFO line per HTTP request and per MCP session would drown the figures.
QUIET_LOGGERS = ("httpx", "httpx2", "mcp")


# --- Django and the database ------------------------------------------------------------------


def ensure_postgres_database(url):
    """CREATE DATABASE for `url` if it does not exist (through the `postgres` database)."""
    import dj_database_url
    import psycopg
    from psycopg import sql

    config = dj_database_url.parse(url)
    params = {"HOST": "host", "PORT": "port", "USER": "user", "PASSWORD": "password"}
    params = {arg: config[key] for key, arg in params.items() if config.get(key)}
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        query = "SELECT 1 FROM pg_database WHERE datname = %s"
        if not conn.execute(query, (config["NAME"],)).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(config["NAME"])))
            print(f"created database {config['NAME']!r}")


def setup_django(workdir=None, flush=()):
    """Set Django up on DATABASE_URL — by default (with a `workdir`) a SQLite file in it; a
    PostgreSQL database is created if missing — then migrate and empty the tables of the
    `flush` models ("app_label.Model")."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcplet_host.settings")
    if workdir is not None:
        os.environ.setdefault("DATABASE_URL", f"sqlite:///{workdir / 'bench.sqlite3'}")
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        ensure_postgres_database(url)

    import django

    django.setup()
    from mcplet_host import tracing

    tracing.setup()  # as a worker does, if OTEL_* asks for traces (docs/tracing.md)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)

    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    flush_tables(flush)


def flush_tables(labels):
    """Empty the tables of these models ("app_label.Model") and reset their sequences,
    cascading to the tables that refer to them (many-to-many tables included)."""
    if not labels:
        return
    from django.apps import apps
    from django.core.management.color import no_style
    from django.db import connection

    tables = [apps.get_model(label)._meta.db_table for label in labels]
    statements = connection.ops.sql_flush(
        no_style(), tables, reset_sequences=True, allow_cascade=True
    )
    connection.ops.execute_sql_flush(statements)


def describe_database(where=None):
    """Which database the figures come from: vendor, version, the durability settings that
    matter on PostgreSQL, and `where` (default: the database's name)."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            version = []
            for setting in ("server_version", "synchronous_commit", "fsync"):
                cursor.execute(f"SHOW {setting}")
                version.append(f"{setting}={cursor.fetchone()[0]}")
            version[0] = version[0].removeprefix("server_version=")
            version = ", ".join(version)
        elif connection.vendor == "sqlite":
            cursor.execute("SELECT sqlite_version()")
            version = cursor.fetchone()[0]
        else:
            version = "?"
    return f"{connection.display_name} {version} ({where or connection.settings_dict['NAME']})"


@contextlib.contextmanager
def scratch(prefix, keep=False):
    """A temporary directory for the run (the SQLite file, specs, logs), removed at the end
    after the database connections are closed (unless `keep`)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        if keep:
            print(f"logs kept in {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


class Echo:
    """An agent handler (`Agent.handler = "bench.common.Echo"`) with no LLM work: it finishes
    the run at once, answering its parameters, so a benchmark measures the host around it."""

    def __init__(self, run):
        self.run = run

    def advance(self):
        from agents import ending
        from agents.models import AgentRun

        ending.finish(self.run, AgentRun.Status.SUCCESS, result={"echo": self.run.parameters})


class HeldEcho(Echo):
    """Echo for an agent whose result a person approves (`result_needs_approval`): the same
    answer, held by the host's own result approval (the built-in loop's, with no LLM turn) and
    given once approved."""

    def advance(self):
        from agents import runner

        self.run.result = {"echo": self.run.parameters}  # not saved while it waits: set again
        runner.Loop(self.run).advance()


# --- figures ----------------------------------------------------------------------------------


def stats(values):
    """Median, p95 (nearest rank), mean and minimum of `values`, in their unit; NaN if none."""
    if not values:
        return dict.fromkeys(("median", "p95", "mean", "min"), float("nan"))
    ordered = sorted(values)
    return {
        "median": statistics.median(ordered),
        "p95": ordered[math.ceil(0.95 * len(ordered)) - 1],
        "mean": statistics.fmean(ordered),
        "min": ordered[0],
    }


class Stopwatch:
    """Adds up the time spent inside the functions it wraps, and counts their calls. Safe
    across threads: a server thread of the benchmark may be inside one meanwhile."""

    def __init__(self):
        self.seconds, self.calls = 0.0, 0
        self._lock = threading.Lock()

    def wrap(self, func):
        @functools.wraps(func)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                with self._lock:
                    self.seconds += elapsed
                    self.calls += 1

        return timed

    def reset(self):
        with self._lock:
            self.seconds, self.calls = 0.0, 0


def profile_tasks(path, skip):
    """(A benchmark's Celery worker.) Profile the thread CPU time of each host task
    after the first `skip` (the warm-up: schemas compiled, code loaded), from task_prerun to
    task_postrun (after the host's own prerun, which closes an aged database connection), one
    profiler per pool thread; at shutdown write them together to `path`."""
    from celery import signals

    local, profiles, seen = threading.local(), [], itertools.count()

    @signals.task_prerun.connect(weak=False)
    def enable(task=None, **kwargs):
        local.on = not task.name.startswith("bench.") and next(seen) >= skip
        if local.on:
            if not hasattr(local, "profile"):
                local.profile = cProfile.Profile(time.thread_time)
                profiles.append(local.profile)
            local.profile.enable()

    @signals.task_postrun.connect(weak=False)
    def disable(**kwargs):
        if local.on:
            local.profile.disable()

    @signals.worker_shutdown.connect(weak=False)
    def dump(**kwargs):
        if profiles:
            pstats.Stats(*profiles).dump_stats(path)


def print_profile(source, title, top, sorts=("cumulative", "tottime")):
    """The `top` rows of a cProfile.Profile (or a stats file) by each of `sorts`."""
    for sort in sorts:
        out = io.StringIO()
        pstats.Stats(source, stream=out).strip_dirs().sort_stats(sort).print_stats(top)
        text = out.getvalue().strip("\n")
        print(f"\n--- {title}, by {sort} ---\n{text}")


# --- processes --------------------------------------------------------------------------------


def cpu_seconds(pid=None):
    """CPU time (user + system) of a process so far, from /proc; NaN where there is none."""
    try:
        stat = Path(f"/proc/{pid or os.getpid()}/stat").read_text()
    except OSError:
        return float("nan")
    fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state is field 3
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def delete_queues(*names):
    """Remove a benchmark's private Celery queues from the Redis broker (REDIS_URL): their lists
    and bindings (kombu's queue_delete only forgets the bindings its own channel declared)."""
    import redis

    with redis.Redis.from_url(os.environ["REDIS_URL"]) as client:
        for name in names:
            keys = [name, f"_kombu.binding.{name}", f"_kombu.binding_permanent.{name}"]
            keys += list(client.scan_iter(match=f"{name}\x06\x16*"))  # kombu's priority lists
            client.delete(*keys)


def refuse(message):
    """Exit with status 2 and a message that names the script (a set-up the benchmark needs)."""
    print(f"bench/{Path(sys.argv[0]).name}: {message}", file=sys.stderr)
    sys.exit(2)


# --- approvals -------------------------------------------------------------------------------


def approver_session(username="manager"):
    """A user who may approve held calls, logged in: the session key its browser would hold."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.test import Client

    user = get_user_model().objects.create_user(username, f"{username}@example.org", "pw-ok-1")
    user.user_permissions.add(Permission.objects.get(codename="approve_ceremony"))
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def synced_passkey():
    """A software passkey whose counter stays 0, as synced (platform) passkeys' do and WebAuthn
    allows: approvers sharing one credential at once would otherwise see their assertions reach
    the host out of order, a third of them refused as replays (bench/load.py)."""
    from tests.passkey.authenticator import SoftAuthenticator

    class SyncedPasskey(SoftAuthenticator):
        sign_count = property(lambda self: 0, lambda self, value: None)

    return SyncedPasskey()


def invariants(tally):
    """The fault harness's invariants (tests/faults/harness.py's Tally) in one line."""
    return (
        f"invariants: {len(tally.lost)} lost, {len(tally.doubles)} double executions, "
        f"{len(tally.unapproved)} unapproved executions, {len(tally.unanswered)} requests "
        f"without exactly one response (runs still waiting on an approval excluded), "
        f"{len(tally.stuck)} stuck, chain {'intact' if tally.chain_intact else 'BROKEN'}"
    )
