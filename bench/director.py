"""The Director's "Run now": from the operator's click to the cycle's end, on a real worker.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/mcplet_bench_director \\
    REDIS_URL=redis://127.0.0.1:6379/5 SECRET_KEY=bench .venv/bin/python bench/director.py \\
        [--pool prefork|threads] [--concurrency 2] [--runs 5]

The reference agents are seeded (`seed_reference`: the Director, its target, their scripted
model). A Celery worker starts as compose starts it (prefork by default) on a private queue;
as soon as it says it is ready (then again with a new worker, `--settle` seconds after it is
ready: its warm-up over), the operator's "Run now" is posted to the dashboard's control
view (Django's test client in this process, signed in as a superuser): the view queues the
cycle on the real broker, and the time runs until the cycle's audit event
(`director.cycle.ran`, or another outcome) is committed — the LLM turn and the task sent on the
bus included. Then `--runs` more clicks, one after the other. The task the
cycle sends goes to the default queue, which no worker here consumes: only the Director runs.
Prints each latency, and the worker's time from start to ready. It needs a Redis database of its
own: it empties the default queue there at the end. Nothing is asserted.
"""

import argparse
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.common

from bench import common
from tests.processes import stop

DIRECTOR = "director"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", choices=["prefork", "threads"], default="prefork")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5, help="clicks on the warm worker")
    parser.add_argument(
        "--settle",
        type=float,
        default=20.0,
        help="seconds a second new worker runs before its first click (its warm-up done)",
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per cycle, at most")
    return parser.parse_args(argv)


@contextlib.contextmanager
def worker(queue, pool, concurrency, log_path):
    """(process, seconds from start to "ready") of a worker consuming only `queue`."""
    command = [sys.executable, "-m", "celery", "-A", "mcplet_host", "worker", "-Q", queue]
    command += ["-P", pool, "-c", str(concurrency), "-n", f"{queue}@%h", "-l", "INFO"]
    command += ["--without-mingle", "--without-gossip"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DB_CONN_MAX_AGE": "60"}
    started = time.perf_counter()
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=common.ROOT, env=env, stdout=log, stderr=log)
    try:
        while " ready." not in log_path.read_text(errors="replace"):
            if process.poll() is not None or time.perf_counter() - started > 120:
                raise RuntimeError("the worker did not start")
            time.sleep(0.01)
        yield process, time.perf_counter() - started
    except BaseException:
        print(log_path.read_text(errors="replace")[-3000:], file=sys.stderr)
        raise
    finally:
        stop(process, 20)


def click(client, director, timeout):
    """(seconds from the POST to the cycle's audit event, its outcome)."""
    from django.urls import reverse

    from mcplet_host.models import AuditEvent

    last = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
    started = time.perf_counter()
    response = client.post(reverse("dashboard:run-director", args=[director.pk]))
    if response.status_code != 302:
        raise RuntimeError(f"Run now answered {response.status_code}")
    while time.perf_counter() - started < timeout:
        event = (
            AuditEvent.objects.filter(seq__gt=last, event_type__startswith="director.cycle.")
            .values_list("event_type", flat=True)
            .first()
        )
        if event:
            return time.perf_counter() - started, event.removeprefix("director.cycle.")
        time.sleep(0.005)
    raise RuntimeError(f"no cycle within {timeout} s")


def main(argv=None):
    args = parse_args(argv)
    if not os.environ.get("REDIS_URL"):
        common.refuse("REDIS_URL is not set: the worker and this process share its broker.")
    queue = f"bench-director-{os.getpid()}"
    with common.scratch("mcplet-bench-director-") as workdir:
        common.setup_django(workdir)
        from django.contrib.auth import get_user_model
        from django.core.management import call_command
        from django.test import Client

        from agents.models import Agent
        from mcplet_host.celery import app

        call_command("seed_reference", verbosity=0)
        director = Agent.objects.get(agent_id=DIRECTOR)
        app.conf.task_default_queue = queue
        user, _ = get_user_model().objects.get_or_create(
            username="bench-operator", defaults={"is_staff": True, "is_superuser": True}
        )
        client = Client(HTTP_HOST="localhost")  # one of ALLOWED_HOSTS
        client.force_login(user)
        print(f"database: {common.describe_database()}; worker: {args.pool}, -c {args.concurrency}")
        try:
            for settle in (0, args.settle):
                with worker(queue, args.pool, args.concurrency, workdir / "worker.log") as (
                    _,
                    ready,
                ):
                    time.sleep(settle)
                    first, outcome = click(client, director, args.timeout)
                    print(
                        f"a new worker, ready in {ready:.2f} s; {settle:.0f} s later, the first "
                        f"Run now → cycle {outcome}: {first:.3f} s"
                    )
                    later = [click(client, director, args.timeout)[0] for _ in range(args.runs)]
                    stats = common.stats(later)
                    print(
                        f"  then {args.runs} more, one after the other: median "
                        f"{stats['median'] * 1000:.0f} ms, max {max(later) * 1000:.0f} ms"
                    )
        finally:
            common.delete_queues(queue, "celery")


if __name__ == "__main__":
    main()
