"""Local A2A bus benchmark: round trips per second through the real broker, and the per-message
overhead of signing and persistence.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/mcplet_bench \\
    REDIS_URL=redis://127.0.0.1:6379/0 SECRET_KEY=bench .venv/bin/python bench/bus.py \\
        [--messages 500] [--pool threads|prefork] [--concurrency 4] [--warmup 20]
        [--wait notify|poll] [--poll-ms 1] [--profile [--top 25]]

A bus round trip is `a2a.bus.send_task("bench-sender", "bench-echo", {"i": i})` from this
process (validate, sign, persist, and after the commit queue `agents.deliver`); a real Celery
worker subprocess delivers it (checks the signature, the sender and the recipient, starts an
AgentRun) and the recipient's handler, `bench.common.Echo`, does no LLM work: it finishes the run
at once, which persists the one task response and its audit event. The round trip ends when
this process learns that the response is committed: by default the worker (and only the
bench's worker, which imports this module) pushes the request's id to a Redis list from a
post_save hook after the commit, and this process BLPOPs it; `--wait poll` polls the database
instead (which costs CPU the worker then lacks on a small machine).

The baseline is an unsigned, unpersisted Celery round trip through the same broker and worker:
`bench.echo.delay(i).get()`, a task that returns its argument through the Redis result backend.

Both are measured one at a time (latency: median, p95; in five blocks each, taken in turn, so
that a load that comes and goes weighs on both) and in a burst of `--messages` sent at once then
awaited (throughput), and the ratios bus/baseline are printed, with the CPU time of
both processes per message and the database sessions opened per message. The bus's
server-side latency is split into stages from the rows' own timestamps.

Before that, with no worker running, the host-side pieces of one message are timed in this
process: schema validation, signing, verification, an insert, the whole `send_task` with the
publish stubbed, the broker publish alone, one ORM look-up and one autocommit UPDATE (unit
costs), and the worker side, `agents.deliver` called in process, broken down by step with its
SQL statements. `--profile` adds a CPU-time cProfile of that in-process worker side.

It needs the real broker (REDIS_URL) and a database both processes share (DATABASE_URL; a
PostgreSQL database is created if missing). It migrates and clears the agents and A2A tables at
the start, so do not run it beside another benchmark on the same database. Its tasks travel on
a private queue, so another worker on the same Redis cannot take them; but anything that
flushes that Redis database meanwhile (the test suite's autouse `cache.clear()` does) drops
its tasks and results: it warns when it sees that happen. Nothing is asserted.
"""

import argparse
import contextlib
import functools
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from celery import shared_task

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.common

from bench import common, web
from bench.bus_pieces import ECHO, SENDER, host_pieces, ms, print_pieces
from tests.processes import stop

HANDLER = "bench.common.Echo"
NOTIFY_ENV = "MCPLET_BENCH_BUS_NOTIFY"
NOTIFY_FROM_ENV = "MCPLET_BENCH_BUS_NOTIFY_FROM"  # bench/chain.py: the chain's last agent
QUEUE_ENV = "MCPLET_BENCH_BUS_QUEUE"
PROFILE_ENV = "MCPLET_BENCH_WORKER_PROFILE"  # a path: the worker profiles its tasks there
BLOCKS = 5  # the sequential round trips: the baseline's and the bus's blocks, in turn
PROFILE_SKIP = 30  # host tasks not profiled: a warm-up of that many goes first


@functools.cache
def _redis():
    import redis

    return redis.Redis.from_url(os.environ["REDIS_URL"])


def _notify_response(sender, instance, created, **kwargs):
    """(The bench's worker only.) Once a response to bench-sender (or, with NOTIFY_FROM_ENV, a
    response from one of the agents it names) is committed, push its request's id and its
    context id to a Redis list: the bench learns of it without polling the database."""
    if not created or instance.type != "task_response":
        return
    senders = os.environ.get(NOTIFY_FROM_ENV)
    if (instance.sender_id in senders.split(",")) if senders else instance.recipient_id == SENDER:
        from django.db import transaction

        key, ids = os.environ[NOTIFY_ENV], f"{instance.reply_to} {instance.context_id}"
        transaction.on_commit(lambda: _redis().rpush(key, ids))


def _connect_notify():
    from django.db.models.signals import post_save

    post_save.connect(_notify_response, sender="a2a.A2AMessage", dispatch_uid="bench.bus.notify")


if os.environ.get(NOTIFY_ENV):
    _connect_notify()


if os.environ.get(PROFILE_ENV):
    common.profile_tasks(os.environ[PROFILE_ENV], PROFILE_SKIP)
if os.environ.get(QUEUE_ENV):  # the bench's worker: what it sends (a hand-off) stays private
    from mcplet_host.celery import app as _app

    _app.conf.task_default_queue = os.environ[QUEUE_ENV]


@shared_task(name="bench.echo")
def echo(value):
    """The baseline: a plain Celery round trip with its result (`--include bench.bus`)."""
    return value


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500, help="messages per measurement")
    parser.add_argument(
        "--pool",
        choices=("threads", "prefork"),
        default="threads",
        help="the worker's execution pool: threads in one process, or prefork's child processes "
        "as compose's workers run (default: %(default)s)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=4, help="worker threads, or prefork's processes"
    )
    parser.add_argument("--warmup", type=int, default=20, help="untimed round trips of each kind")
    parser.add_argument(
        "--wait",
        choices=("notify", "poll"),
        default="notify",
        help="how the bench learns of a bus response: the worker pushes its id to Redis after "
        "the commit (notify), or the bench polls the database (poll) (default: %(default)s)",
    )
    parser.add_argument(
        "--poll-ms", type=float, default=1.0, help="--wait poll: interval of a sequential poll"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the in-process deliver")
    parser.add_argument("--top", type=int, default=25, help="rows of profile output")
    return parser.parse_args(argv)


# --- database ---------------------------------------------------------------------------------


def setup_database():
    """Migrate, clear the agents and A2A tables (the agents' grants and targets cascade),
    create the two agents."""
    common.setup_django(
        flush=("agents.AgentRun", "a2a.A2AMessage", "a2a.PartnerKey", "agents.Agent")
    )
    from agents.models import Agent

    Agent.objects.create(agent_id=SENDER, display_name="Bench sender", kind=Agent.Kind.INTERNAL)
    Agent.objects.create(
        agent_id=ECHO, display_name="Bench echo", kind=Agent.Kind.INTERNAL, handler=HANDLER
    )


# --- waiting ----------------------------------------------------------------------------------


def wait_for(predicate, what, worker, timeout, poll):
    deadline = time.monotonic() + timeout
    while not predicate():
        if worker is not None and worker.poll() is not None:
            raise RuntimeError(f"the worker exited ({worker.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}{flush_hint()}")
        time.sleep(poll)


def phase_timeout(n):
    return 60 + 0.5 * n


# --- the worker -------------------------------------------------------------------------------


@contextlib.contextmanager
def celery_worker(queue, concurrency, log_path, notify_key, more_env=None, pool="threads"):
    """A real worker subprocess on the private queue (what it sends goes there too), importing
    this module's task/handler; `pool`: Celery's execution pool (`prefork`: `concurrency` child
    processes, as compose's workers run); `more_env`: more of its environment."""
    command = [sys.executable, "-m", "celery", "-A", "mcplet_host", "worker"]
    command += ["-P", pool, "-c", str(concurrency), "-n", f"{queue}@%h", "-Q", queue]
    command += ["--include", "bench.bus", "--without-mingle", "--without-gossip", "-l", "WARNING"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", NOTIFY_ENV: notify_key, QUEUE_ENV: queue}
    env.update(more_env or {})
    env.setdefault("DB_CONN_MAX_AGE", "60")  # its connection kept across tasks, as compose's
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=common.ROOT, env=env, stdout=log, stderr=log)
    try:
        wait_ready(process)
        wait_quiet(process)
        yield process
    except BaseException:
        tail = Path(log_path).read_text(errors="replace")[-3000:]
        print(f"--- worker log ({log_path}), last lines ---\n{tail}", file=sys.stderr)
        raise
    finally:
        stop(process, 20)


def wait_ready(process, timeout=90):
    """Ready when an echo task comes back (the worker logs nothing at WARNING). The probe is
    sent again every few seconds, in case something flushed the Redis database meanwhile."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    deadline, probes = time.monotonic() + timeout, []
    try:
        while True:
            probes.append(echo.delay("ready"))
            for _ in range(5):
                if process.poll() is not None:
                    raise RuntimeError(
                        f"the worker exited ({process.returncode}) before it was ready"
                    )
                try:
                    probes[-1].get(timeout=1)
                    return
                except CeleryTimeout:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"the worker was not ready after {timeout} s{flush_hint()}"
                        ) from None
    finally:
        time.sleep(0.2)  # an earlier probe may still be answering
        forget(probes)


def wait_quiet(process, timeout=60, window=0.5, busy=0.05):
    """Once ready, a worker still loads what its first task would (litellm, the MCP sessions)
    in a thread for a few seconds: measured then, Celery's own echo shared the worker with that
    load (4 ms of the worker's CPU an echo, its mean twice its median). Wait until the worker's
    processes use under `busy` of a CPU over `window` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cpu = web.tree_cpu_seconds(process.pid)
        time.sleep(window)
        if web.tree_cpu_seconds(process.pid) - cpu < busy * window:
            return
    print(f"(the worker was still busy {timeout} s after it was ready: measuring anyway)")


SENTINEL = []  # the Redis key this run sets at the start: gone if its database was flushed


def plant_sentinel(key):
    _redis().set(key, "1", ex=24 * 3600)
    SENTINEL.append(key)


def flush_hint():
    try:
        flushed = bool(SENTINEL) and not _redis().exists(SENTINEL[0])
    except Exception:
        return ""
    if not flushed:
        return ""
    return (
        " (meanwhile something flushed this Redis database, dropping queued tasks and results:"
        " the test suite's autouse cache.clear() runs FLUSHDB; do not share the database with it)"
    )


# --- round trips ------------------------------------------------------------------------------


def database_sessions():
    """Sessions ever opened on this PostgreSQL database (pg_stat_database), NaN elsewhere."""
    from django.db import connection

    if connection.vendor != "postgresql" or connection.pg_version < 140000:
        return float("nan")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


def responses(message_ids):
    from a2a.models import A2AMessage

    return A2AMessage.objects.filter(
        type=A2AMessage.Type.TASK_RESPONSE, reply_to__in=list(message_ids)
    )


class Rig:
    """The running worker, and how this process learns that responses exist."""

    def __init__(self, worker, key, wait, poll):
        self.worker, self.key, self.wait, self.poll = worker, key, wait, poll

    def await_responses(self, ids, timeout):
        if self.wait == "poll":
            what = f"{len(ids)} response(s)"
            if len(ids) == 1:
                wait_for(lambda: responses(ids).exists(), what, self.worker, timeout, self.poll)
            else:
                check = lambda: responses(ids).count() == len(ids)  # noqa: E731
                wait_for(check, what, self.worker, timeout, max(self.poll, 0.01))
            return
        pending = {str(message_id) for message_id in ids}
        deadline = time.monotonic() + timeout
        while pending:
            if self.worker.poll() is not None:
                raise RuntimeError(f"the worker exited ({self.worker.returncode})")
            item = _redis().blpop(self.key, timeout=1)
            if item is not None:  # "<request id> <context id>": either may be awaited
                pending.difference_update(item[1].decode().split())
            elif time.monotonic() > deadline:
                raise RuntimeError(
                    f"timed out waiting for {len(pending)} response(s){flush_hint()}"
                )

    @contextlib.contextmanager
    def measured(self, result):
        """Adds to `result` the wall time, the CPU time of this process and of the worker, and
        how many database sessions were opened meanwhile."""
        sessions = database_sessions()
        wall, mine, theirs = (
            time.perf_counter(),
            time.process_time(),
            web.tree_cpu_seconds(self.worker.pid),
        )
        yield result
        result["total"] = time.perf_counter() - wall
        result["bench_cpu"] = time.process_time() - mine
        result["worker_cpu"] = web.tree_cpu_seconds(self.worker.pid) - theirs
        result["sessions"] = database_sessions() - sessions


def celery_sequential(rig, n, timeout=60):
    done = []
    with rig.measured({"latencies": []}) as result:
        for i in range(n):
            start = time.perf_counter()
            done.append(echo.delay(i))
            done[-1].get(timeout=timeout)
            result["latencies"].append(time.perf_counter() - start)
    forget(done)
    return result


def forget(results):
    """Delete the results from the backend (untimed), rather than leave them for an hour."""
    with contextlib.suppress(Exception):
        _redis().delete(*[echo.backend.get_key_for_task(r.id) for r in results])


def celery_burst(rig, n):
    with rig.measured({}) as result:
        start = time.perf_counter()
        pending = [echo.delay(i) for i in range(n)]
        result["send"] = time.perf_counter() - start
        for item in pending:
            item.get(timeout=phase_timeout(n))
    forget(pending)
    return result


def bus_sequential(rig, n, offset=0):
    from a2a import bus

    _redis().delete(rig.key)
    with rig.measured({"latencies": [], "ids": []}) as result:
        for i in range(n):
            start = time.perf_counter()
            row = bus.send_task(SENDER, ECHO, {"i": offset + i})
            rig.await_responses([row.message_id], 60)
            result["latencies"].append(time.perf_counter() - start)
            result["ids"].append(row.message_id)
    return result


def sequential_in_turn(rig, n):
    """The baseline's and the bus's one-at-a-time round trips in BLOCKS blocks each, taken in
    turn (a load that comes and goes weighs on both): their results, each summed over its
    blocks."""
    baseline, through_bus, block = {}, {}, max(1, n // BLOCKS)
    for i in range(BLOCKS):
        _add(baseline, celery_sequential(rig, block))
        _add(through_bus, bus_sequential(rig, block, offset=i * block))
    return baseline, through_bus


def _add(total, result):
    for key, value in result.items():
        total[key] = total.get(key, type(value)()) + value


def bus_burst(rig, n, offset=0):
    from a2a import bus

    _redis().delete(rig.key)
    with rig.measured({}) as result:
        start = time.perf_counter()
        ids = [bus.send_task(SENDER, ECHO, {"i": offset + i}).message_id for i in range(n)]
        result["send"], result["ids"] = time.perf_counter() - start, ids
        rig.await_responses(ids, phase_timeout(n))
    return result


def check_responses(ids, label):
    """Warn (stderr) unless every request got one successful response."""
    got = list(responses(ids).values_list("status", "body"))
    bad = [body for status, body in got if status != "success"]
    if len(got) != len(ids) or bad:
        reasons = sorted(
            {str((b.get("payload") or {}).get("error", {}).get("message")) for b in bad}
        )
        print(
            f"  WARNING ({label}): {len(got)} responses to {len(ids)} requests, {len(bad)} not "
            f"successful: {'; '.join(reasons)[:300]} (did another process clear the agents "
            "table? bench/gateway.py flushes it on the same database)",
            file=sys.stderr,
        )


STAGES = (
    ("queue", "request insert → run started (commit, publish, broker, worker, auth, look-ups)"),
    ("run", "run started → finish() (its commit, the handler)"),
    ("respond", "finish() → response inserted (save run, build + validate response)"),
    ("audit", "response inserted → audit event (commit, mark answered, chain lock)"),
    ("server", "request insert → response inserted (server-side latency)"),
)


def server_stages(ids):
    """Per-message stage durations (seconds) from the rows' own timestamps."""
    from a2a.models import A2AMessage
    from agents.models import AgentRun
    from mcplet_host.models import AuditEvent

    requests = {m.pk: m for m in A2AMessage.objects.filter(message_id__in=ids)}
    answers = {m.reply_to: m for m in responses(ids)}
    runs = list(AgentRun.objects.filter(request_id__in=list(requests)))
    events = AuditEvent.objects.filter(
        event_type="agent.run.finished", trace_id__in=[r.context_id for r in runs]
    )
    audited = {e.details.get("run"): e.timestamp for e in events}
    out = defaultdict(list)
    for run in runs:
        request = requests[run.request_id]
        answer = answers.get(request.message_id)
        finished_audit = audited.get(str(run.pk))
        if answer is None or run.finished_at is None or finished_audit is None:
            continue
        out["queue"].append((run.started_at - request.created_at).total_seconds())
        out["run"].append((run.finished_at - run.started_at).total_seconds())
        out["respond"].append((answer.created_at - run.finished_at).total_seconds())
        out["audit"].append((finished_audit - answer.created_at).total_seconds())
        out["server"].append((answer.created_at - request.created_at).total_seconds())
    return out


# --- report -----------------------------------------------------------------------------------


def print_round_trips(n, results, wait):
    base_seq, bus_seq = (
        common.stats(results["celery_seq"]["latencies"]),
        common.stats(results["bus_seq"]["latencies"]),
    )
    base_burst, bus_burst = results["celery_burst"], results["bus_burst"]
    base_rate, bus_rate = n / base_burst["total"], n / bus_burst["total"]
    print(f"\n2. Round trips through the broker ({n} messages each)")
    print(
        f"   {'':<36} {'sequential latency, ms':^26} | {'burst':^29}\n"
        f"   {'':<36} {'median':>8} {'p95':>8} {'mean':>8} | {'msgs/s':>8} {'send msgs/s':>12} "
        f"{'total s':>7}"
    )
    print("   " + "-" * 101)
    for label, seq, burst, rate in (
        ("Celery echo (unsigned, unpersisted)", base_seq, base_burst, base_rate),
        ("A2A bus (sign, persist, run, reply)", bus_seq, bus_burst, bus_rate),
    ):
        print(
            f"   {label:<36} {ms(seq['median'])} {ms(seq['p95'])} {ms(seq['mean'])} | "
            f"{rate:>8.1f} {n / burst['send']:>12.1f} {burst['total']:>7.2f}"
        )
    ratio = {k: bus_seq[k] / base_seq[k] for k in ("median", "p95", "mean")}
    print(
        f"   {'ratio bus / baseline':<36} {ratio['median']:>8.2f} {ratio['p95']:>8.2f} "
        f"{ratio['mean']:>8.2f} | {bus_rate / base_rate:>8.2f}"
    )
    extra = bus_seq["median"] - base_seq["median"]
    print(
        f"\n   per-message overhead of the bus: +{extra * 1e3:.2f} ms of latency (medians); "
        f"+{(1 / bus_rate - 1 / base_rate) * 1e3:.2f} ms per message in a burst (1/throughput)."
    )
    how = {
        "notify": "the worker pushes the request id to a Redis list after the response commits "
        "(bench-only post_save hook), the bench BLPOPs it",
        "poll": f"the bench polls the database every {results['poll_ms']:g} ms (10 ms in a burst)",
    }[wait]
    print(f"   a bus round trip ends when the bench learns of the response: {how}.")
    print(
        "   burst: all sent from this one process, then all awaited; 'send msgs/s' = sending only."
    )

    print(
        "\n   per message: CPU ms of this process / of the worker (user + system), wall ms,"
        " new database sessions:"
    )
    for key, label in (
        ("celery_seq", "Celery echo, sequential"),
        ("celery_burst", "Celery echo, burst"),
        ("bus_seq", "A2A bus, sequential"),
        ("bus_burst", "A2A bus, burst"),
    ):
        r = results[key]
        count = len(r.get("latencies", ())) or n  # the blocks in turn: a multiple of BLOCKS
        print(
            f"   {label:<36} {r['bench_cpu'] / count * 1e3:>8.2f} / "
            f"{r['worker_cpu'] / count * 1e3:>6.2f}   wall {r['total'] / count * 1e3:>6.2f}   "
            f"sessions {r['sessions'] / count:.2f}"
        )

    for key, label in (("stages_seq", "sequential"), ("stages_burst", "burst")):
        stages = results[key]
        print(f"\n   bus server-side stages, {label} (from the rows' timestamps), ms:")
        print(f"   {'stage':<82} {'median':>8} {'p95':>8}")
        for name, text in STAGES:
            if stages.get(name):
                st = common.stats(stages[name])
                print(f"   {text:<82} {ms(st['median'])} {ms(st['p95'])}")


# --- main -------------------------------------------------------------------------------------


def main(argv=None):
    args = parse_args(argv)
    if not os.environ.get("REDIS_URL"):
        common.refuse(
            "REDIS_URL is not set. This benchmark measures the real broker and a worker "
            "subprocess; without REDIS_URL the host runs embedded (in-memory broker, no worker). "
            "Set e.g. REDIS_URL=redis://127.0.0.1:6379/0."
        )
    if not os.environ.get("DATABASE_URL"):
        common.refuse(
            "DATABASE_URL is not set. The worker subprocess must share the database, and this "
            "benchmark clears the agents and A2A tables: point it at a throwaway database, e.g. "
            "DATABASE_URL=postgres://postgres@127.0.0.1:5432/mcplet_bench."
        )
    if args.messages < 1:
        common.refuse("--messages must be at least 1")
    # A private queue: another worker on the same Redis (a test run) cannot take these tasks.
    queue = f"bench-bus-{os.getpid()}"
    sink = f"{queue}-sink"
    with common.scratch("mcplet-bench-bus-") as workdir:
        setup_database()
        from mcplet_host.celery import app

        app.conf.task_default_queue = queue
        try:
            run(args, app, queue, sink, workdir)
        finally:
            with contextlib.suppress(Exception):
                common.delete_queues(queue, sink)
            with contextlib.suppress(Exception):
                _redis().delete(f"{queue}:responses", f"{queue}:sentinel")


def run(args, app, queue, sink, workdir):
    """Time the host-side pieces, then the round trips through a worker; print the figures."""
    n = args.messages
    print(f"database: {common.describe_database()}")
    print(
        f"broker: {app.conf.broker_url.split('@')[-1]}, private queue {queue!r}; worker: "
        f"-P {args.pool} -c {args.concurrency}; {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.2f}; {n} messages per run"
    )
    plant_sentinel(f"{queue}:sentinel")
    print("timing the host-side pieces in process ...", flush=True)
    pieces = host_pieces(n, sink, profile=args.profile)
    results = {"poll_ms": args.poll_ms}
    key = f"{queue}:responses"
    print("starting the worker ...", flush=True)
    log = workdir / "worker.log"
    with celery_worker(queue, args.concurrency, log, key, pool=args.pool) as worker:
        rig = Rig(worker, key, args.wait, args.poll_ms / 1000)
        celery_sequential(rig, args.warmup)
        bus_sequential(rig, args.warmup, offset=-args.warmup)
        print(f"sequential, the baseline and the bus in turn ({BLOCKS} blocks) ...", flush=True)
        results["celery_seq"], results["bus_seq"] = sequential_in_turn(rig, n)
        print("bursts: the baseline, then the bus ...", flush=True)
        results["celery_burst"] = celery_burst(rig, n)
        results["bus_burst"] = bus_burst(rig, n, offset=n)
    for phase in ("bus_seq", "bus_burst"):
        check_responses(results[phase]["ids"], phase)
    results["stages_seq"] = server_stages(results["bus_seq"]["ids"])
    results["stages_burst"] = server_stages(results["bus_burst"]["ids"])
    print_pieces(*pieces[:3])
    print_round_trips(n, results, args.wait)
    print(f"\nload average (1 min) at the end: {os.getloadavg()[0]:.2f}")
    if flush_hint():
        print(f"\nWARNING: the figures may be wrong{flush_hint()}.", file=sys.stderr)
    if pieces[3] is not None:
        title = "cProfile (CPU time), agents.deliver in process"
        common.print_profile(pieces[3], title, args.top)


if __name__ == "__main__":
    main()
