"""A 3-agent chain, each step durable, no LLM work: ours beside LangGraph with its PostgreSQL
checkpointer, on the same PostgreSQL, in one run (issue 26).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/mcplet_bench \\
    REDIS_URL=redis://127.0.0.1:6379/0 SECRET_KEY=bench .venv/bin/python bench/chain.py \\
        [--chains 100] [--block 10] [--concurrency 4] [--warmup 10] [--approve 20] \\
        [--conn-max-age 60] \\
        [--langgraph-database langgraph_bench] [--durability sync] [--profile [--top 25]]

Ours: `bench-sender` sends a task to agent A; A, B and C are handler agents with no LLM work
(`bench.common.Echo`), A hands off to B and B to C (`Agent.hands_off_to`, the host's own
chain). Each hop is a signed, persisted A2A task request delivered by a real Celery worker
subprocess (`agents.deliver`: authenticate, an AgentRun, the handler, one statement for the
run's end, its response, its audit event and the next hop's request); the worker delivers the
hand-offs of the task's runs itself (MCPLET_HAND_OFFS_HERE; 0 sends each through the broker). It
keeps its database connections across tasks (DB_CONN_MAX_AGE=60) as compose's workers do, and
LangGraph its own.
A chain is done when C's response is committed; the worker pushes its context id to Redis after
the commit and this process BLPOPs it (bench/bus.py's rig, reused).

LangGraph: bench/langgraph_chain.py, a graph of three nodes checkpointed by PostgresSaver with
durability "sync" (each step's checkpoint written before the next step), in LangGraph's own
virtualenv (var/langgraph, created from the package registry on first use), on a second
database of the same PostgreSQL server.

Measured on both sides: per hop (a sequential chain's latency / 3), chains per second (a burst
of --chains, --concurrency worker threads on both sides), CPU per chain (ours: this process
and the worker, which both do host work; LangGraph: its one process; PostgreSQL and Redis
counted on neither side), and approve → chain done: C's result held for a person
(`result_needs_approval`, handler `bench.common.HeldEcho`), approved with the held-calls model
as the tests do (`Ceremony.approve`), timed to C's response; LangGraph's last node calls
`interrupt()` and is resumed with `Command(resume=…)`. Both sides run at once, taking turns
block by block (--block chains of ours, then as many of LangGraph's; the bursts in the order
ours, LangGraph's, LangGraph's, ours), so that a load that comes and goes on a shared machine
weighs on both alike.

Before the worker starts, chains run in this process with the broker stubbed (each hop's
delivery called directly, as the worker delivers a hand-off itself): the time per chain, the
SQL statements and commits per hop, the steps of a delivery (bench/bus.py's breakdown).
--profile adds a CPU cProfile of those, and one of the worker's tasks: after the measurements
a second worker profiles the thread CPU time of each task it runs during --chains more
sequential chains.
It clears the agents, A2A and held-call tables of DATABASE_URL and the checkpointer's tables of
the LangGraph database. Nothing is asserted.
"""

import argparse
import contextlib
import cProfile
import os
import sys
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.common

from bench import bus as rig_bench
from bench import bus_pieces as pieces
from bench import common
from bench.langgraph_peer import LangGraph

SENDER, CHAIN = rig_bench.SENDER, ("bench-a", "bench-b", "bench-c")
HOPS = len(CHAIN)
APPROVER = "bench-approver"
FLUSH = ("agents.AgentRun", "held.Ceremony", "a2a.A2AMessage", "a2a.PartnerKey", "agents.Agent")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=100, help="chains per measurement")
    parser.add_argument("--concurrency", type=int, default=4, help="worker threads, both sides")
    parser.add_argument("--warmup", type=int, default=10, help="untimed chains first")
    parser.add_argument("--approve", type=int, default=20, help="approve → done chains (0: none)")
    parser.add_argument(
        "--block", type=int, default=10, help="chains of one side before the other's turn"
    )
    parser.add_argument(
        "--langgraph-database", default="langgraph_bench", help="its database, same server"
    )
    parser.add_argument(
        "--conn-max-age",
        type=int,
        default=60,
        help="the worker's DB_CONN_MAX_AGE: 60 keeps its connections as compose's workers do, 0 "
        "opens a database session per task (default: %(default)s)",
    )
    parser.add_argument(
        "--durability",
        default="sync",
        choices=("sync", "async", "exit"),
        help="LangGraph's: sync writes each step's checkpoint before the next step, as each of "
        "our hops commits before the next (default: %(default)s)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="cProfile in-process chains and the worker's tasks"
    )
    parser.add_argument("--top", type=int, default=25, help="rows of profile output")
    return parser.parse_args(argv)


def merged(parts):
    """The figures of a phase run in blocks, together: lists joined, numbers added."""
    out = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict):
                out[key] = merged([out.get(key, {}), value])
            else:
                out[key] = out[key] + value if key in out else value
    return out


def blocks(n, size):
    return [min(size, n - start) for start in range(0, n, size)]


# --- ours -------------------------------------------------------------------------------------


def setup_database():
    """Migrate, clear the agents, A2A and held-call tables, create the sender and the chain."""
    common.setup_django(flush=FLUSH)
    from django.contrib.auth import get_user_model

    from agents.models import Agent

    Agent.objects.create(agent_id=SENDER, display_name="Bench sender", kind=Agent.Kind.INTERNAL)
    after = None
    for agent_id in reversed(CHAIN):
        after = Agent.objects.create(
            agent_id=agent_id,
            display_name=f"Bench {agent_id}",
            kind=Agent.Kind.INTERNAL,
            handler="bench.common.Echo",
            hands_off_to=after,
        )
    get_user_model().objects.get_or_create(username=APPROVER)


def hold_last(held):
    """The chain's last agent holds its result for a person (or no longer)."""
    from agents.models import Agent

    handler = "bench.common.HeldEcho" if held else "bench.common.Echo"
    Agent.objects.filter(agent_id=CHAIN[-1]).update(handler=handler, result_needs_approval=held)


def start_chain(i):
    from a2a import bus

    return str(bus.send_task(SENDER, CHAIN[0], {"i": i}).context_id)


def sequential(rig, n, offset=0):
    with rig.measured({"latencies": [], "contexts": []}) as result:
        for i in range(n):
            start = time.perf_counter()
            context = start_chain(offset + i)
            rig.await_responses([context], 60)
            result["latencies"].append(time.perf_counter() - start)
            result["contexts"].append(context)
    return result


def burst(rig, n, offset=0):
    with rig.measured({}) as result:
        result["contexts"] = contexts = [start_chain(offset + i) for i in range(n)]
        rig.await_responses(contexts, rig_bench.phase_timeout(HOPS * n))
    return result


def approve_to_done(rig, n, offset):
    """Each chain runs to C's held result (untimed), then: approve → C's response committed.
    Returns the latencies and the server's share (decided_at → response created)."""
    from django.contrib.auth import get_user_model

    from agents.models import AgentRun
    from held.models import Ceremony

    user = get_user_model().objects.get(username=APPROVER)
    latencies, contexts = [], []
    for i in range(n):
        context = start_chain(offset + i)
        waiting = AgentRun.objects.filter(
            context_id=context, agent__agent_id=CHAIN[-1], status=AgentRun.Status.AWAITING_APPROVAL
        )
        rig_bench.wait_for(waiting.exists, f"chain {i} to wait", rig.worker, 60, 0.002)
        ceremony = Ceremony.objects.get(pk=waiting.get().waiting_for_id)
        start = time.perf_counter()
        ceremony.approve(user)
        rig.await_responses([context], 60)
        latencies.append(time.perf_counter() - start)
        contexts.append(context)
    server = []
    for context in contexts:
        decided = Ceremony.objects.get(trace_id=context).decided_at
        answered = chain_rows(context)[2][-1]["created_at"]
        server.append((answered - decided).total_seconds())
    return {"latencies": latencies, "server": server}


def chain_rows(context):
    """A chain's requests, runs (started, finished) and responses, hop by hop."""
    from a2a.models import A2AMessage
    from agents.models import AgentRun

    messages = A2AMessage.objects.filter(context_id=context).order_by("created_at")
    fields = ("message_id", "reply_to", "type", "created_at")
    rows = list(messages.values(*fields))
    requests = [m for m in rows if m["type"] == "task_request"]
    answers = {m["reply_to"]: m for m in rows if m["type"] == "task_response"}
    runs = AgentRun.objects.filter(context_id=context).values("request__message_id", "started_at")
    runs = {r["request__message_id"]: r for r in runs}
    return (
        requests,
        [runs.get(m["message_id"]) for m in requests],
        [answers.get(m["message_id"]) for m in requests],
    )


def hop_stages(contexts):
    """Per hop, from the rows' timestamps: queued (request inserted → its run started: commit,
    publish, broker, worker, authenticate, look-ups), run (→ its response inserted: lease,
    handler, finish), and the chain's server time (first request → C's response)."""
    out = {"server": []}
    for context in contexts:
        requests, runs, answers = chain_rows(context)
        if len(requests) != HOPS or None in runs or None in answers:
            continue
        for k, (request, run, answer) in enumerate(zip(requests, runs, answers, strict=True)):
            started = run["started_at"]
            out.setdefault(f"hop {k + 1} queued", []).append(
                (started - request["created_at"]).total_seconds()
            )
            out.setdefault(f"hop {k + 1} run", []).append(
                (answer["created_at"] - started).total_seconds()
            )
        out["server"].append(
            (answers[-1]["created_at"] - requests[0]["created_at"]).total_seconds()
        )
    return out


def in_process(n, profile):
    """Chains in this process, the broker stubbed: each queued delivery is run as the worker
    runs each hop of a chain (agents.tasks._deliver, one at a time). Returns (seconds per
    chain, CPU seconds per chain, the SQL of one chain's send and hops, the breakdown of the
    deliveries, the profile)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from a2a import bus
    from agents.tasks import _deliver as deliver

    queued = []

    def one_chain(i, breakdown=None, captured=None):
        def capture(name):
            if captured is None:
                return contextlib.nullcontext()
            return captured.setdefault(name, CaptureQueriesContext(connection))

        with capture("the bench's send_task to A"):
            start_chain(i)
        for watch in breakdown.watches.values() if breakdown else ():
            watch.reset()  # the bench's own send is not a delivery's
        for hop in range(1, HOPS + 1):
            started = time.perf_counter()
            with capture(f"agents.deliver, hop {hop}"):
                deliver(*queued.pop(0))
            if breakdown:
                breakdown.end_message(time.perf_counter() - started)
        if queued:
            raise RuntimeError(f"a chain sent {len(queued)} more task(s) than {HOPS} hops")

    with mock.patch.object(bus, "enqueue", lambda task, args: queued.append(args)):
        for i in range(min(n, 10)):
            one_chain(-1 - i)
        cpu = time.process_time()
        times = pieces.timed_loop(n, one_chain)
        cpu = (time.process_time() - cpu) / n
        queries = {}
        one_chain(-100, captured=queries)
        breakdown = pieces.Breakdown()
        with breakdown.patches():
            for i in range(n):
                one_chain(i, breakdown)
        profiler = None
        if profile:
            profiler = cProfile.Profile(time.process_time)
            profiler.enable()
            for i in range(n):
                one_chain(i)
            profiler.disable()
    return times, cpu, queries, breakdown, profiler


# --- report -----------------------------------------------------------------------------------


def row(label, ours, theirs, unit, digits=2):
    ratio = ours / theirs if theirs else float("nan")
    print(f"   {label:<46} {ours:>10.{digits}f} {theirs:>10.{digits}f} {unit:<9} ×{ratio:.2f}")


def print_comparison(n, ours, theirs):
    seq, lg_seq = common.stats(ours["seq"]["latencies"]), common.stats(theirs["seq"]["latencies"])
    rate, lg_rate = 2 * n / ours["burst"]["total"], 2 * n / theirs["burst"]["total"]
    print(
        f"\n2. The 3-agent chain, ours beside LangGraph (PostgresSaver, durability "
        f"{theirs['durability']!r}), in turn by blocks; {n} chains each, bursts 2 × {n}"
    )
    print(f"   {'':<46} {'ours':>10} {'LangGraph':>10} {'':<9} ours/LangGraph")
    per_hop = (seq["median"] / HOPS * 1e3, lg_seq["median"] / HOPS * 1e3)
    row("per hop, median (sequential chain / 3)", *per_hop, "ms")
    for key in ("median", "p95", "mean"):
        row(f"chain, sequential, {key}", seq[key] * 1e3, lg_seq[key] * 1e3, "ms")
    row(f"chains/s, burst ({ours['concurrency']} threads)", rate, lg_rate, "chains/s", 1)
    for phase, count in (("seq", n), ("burst", 2 * n)):
        mine = (ours[phase]["bench_cpu"] + ours[phase]["worker_cpu"]) / count * 1e3
        lg = theirs[phase]["cpu"] / count * 1e3
        row(f"CPU per chain, {phase} (ours: bench + worker)", mine, lg, "ms")
    if ours.get("approve"):
        mine, lg = (
            common.stats(ours["approve"]["latencies"]),
            common.stats(theirs["approve"]["latencies"]),
        )
        for key in ("median", "p95"):
            row(f"approve → chain done, {key}", mine[key] * 1e3, lg[key] * 1e3, "ms")
        server = common.stats(ours["approve"]["server"])["median"]
        print(
            f"   (ours: approval decided → C's response inserted, median {server * 1e3:.2f} ms; "
            f"{len(ours['approve']['latencies'])} chains)"
        )
    for phase, count in (("seq", n), ("burst", 2 * n)):
        r = ours[phase]
        print(
            f"   ours, {phase}: CPU ms per chain, bench {r['bench_cpu'] / count * 1e3:.2f} + "
            f"worker {r['worker_cpu'] / count * 1e3:.2f}; database sessions per chain "
            f"{r['sessions'] / count:.1f}"
        )
    rows = ", ".join(f"{v / n:g} {k}" for k, v in theirs["seq"]["rows"].items())
    print(
        f"   LangGraph per chain: {theirs['seq']['statements'] / n:g} SQL statements; rows "
        f"written: {rows}"
    )


def check_chains(contexts):
    """Warn (stderr) unless every hop of every chain was answered with success."""
    from a2a.models import A2AMessage

    answers = A2AMessage.objects.filter(context_id__in=contexts, type="task_response")
    failed = answers.exclude(status="success").count()
    if answers.count() != HOPS * len(contexts) or failed:
        print(f"  WARNING: {answers.count()} responses in {len(contexts)} chains, {failed} not "
              "successful (another benchmark on the same database?)", file=sys.stderr)  # fmt: skip


def print_stages(ours):
    print("\n3. Our server-side time per hop, from the rows' timestamps (medians, ms):")
    print("   queued = request inserted → its run started (commit, publish, broker, worker,")
    print("            authenticate, look-ups); run = run started → its response inserted (lease,")
    print("            handler, finish: the response, audit and the next hop's request)")
    stages = {phase: hop_stages(ours[phase]["contexts"]) for phase in ("seq", "burst")}
    print(
        f"   {'hop':<24} {'seq queued':>10} {'seq run':>10} {'burst queued':>13} {'burst run':>10}"
    )
    senders = (SENDER, *CHAIN)
    for k in range(1, HOPS + 1):
        cells = [
            common.stats(stages[phase][f"hop {k} {part}"])["median"] * 1e3
            for phase in ("seq", "burst")
            for part in ("queued", "run")
        ]
        label = f"{k}: {senders[k - 1]} → {senders[k]}"
        widths = (10, 10, 13, 10)
        print(
            f"   {label:<24} "
            + " ".join(f"{c:>{w}.2f}" for c, w in zip(cells, widths, strict=True))
        )
    server = {phase: common.stats(stages[phase]["server"])["median"] for phase in stages}
    latency = common.stats(ours["seq"]["latencies"])["median"]
    print(
        f"   first request inserted → C's response inserted: {server['seq'] * 1e3:.2f} ms "
        f"sequential, {server['burst'] * 1e3:.2f} ms in the burst; the bench's send and learning "
        f"of the end (sequential latency − server): {(latency - server['seq']) * 1e3:.2f} ms"
    )


def print_in_process(times, cpu, queries, breakdown):
    st = common.stats(times)
    print("\n1. Our chain in this process, the broker stubbed (each hop delivered directly):")
    print(
        f"   per chain median {st['median'] * 1e3:.2f} ms (p95 {st['p95'] * 1e3:.2f}), per hop "
        f"{st['median'] / HOPS * 1e3:.2f} ms; CPU {cpu * 1e3:.2f} ms per chain"
    )
    pieces.print_breakdown(breakdown, "one hop's agents.deliver, broken down (mean per hop):")
    pieces.print_queries(queries, listed=("agents.deliver, hop 2",))


# --- main -------------------------------------------------------------------------------------


def main(argv=None):
    args = parse_args(argv)
    for name in ("REDIS_URL", "DATABASE_URL"):
        if not os.environ.get(name, "").startswith(("redis", "postgres")[name == "DATABASE_URL"]):
            common.refuse(
                f"{name} is not set (or not Redis/PostgreSQL). This benchmark needs the real "
                "broker and a PostgreSQL database shared with its worker, which it clears: e.g. "
                "REDIS_URL=redis://127.0.0.1:6379/0 "
                "DATABASE_URL=postgres://postgres@127.0.0.1:5432/mcplet_bench."
            )
    if args.chains < 1:
        common.refuse("--chains must be at least 1")
    queue = f"bench-chain-{os.getpid()}"
    with common.scratch("mcplet-bench-chain-") as workdir:
        setup_database()
        from mcplet_host.celery import app

        app.conf.task_default_queue = queue
        try:
            run(args, queue, workdir)
        finally:
            with contextlib.suppress(Exception):
                common.delete_queues(queue)
            with contextlib.suppress(Exception):
                rig_bench._redis().delete(f"{queue}:responses", f"{queue}:sentinel")


def run(args, queue, workdir):
    n = args.chains
    print(f"database: {common.describe_database()}; LangGraph: {args.langgraph_database!r}")
    print(
        f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        f"; {n} chains, worker -P threads -c {args.concurrency}, DB_CONN_MAX_AGE="
        f"{args.conn_max_age}"
    )
    rig_bench.plant_sentinel(f"{queue}:sentinel")
    print("our chain in process ...", flush=True)
    pieces = in_process(n, args.profile)
    print("starting LangGraph's side and our worker ...", flush=True)
    lg = LangGraph(args)
    key = f"{queue}:responses"
    extra = {rig_bench.NOTIFY_FROM_ENV: CHAIN[-1], "DB_CONN_MAX_AGE": str(args.conn_max_age)}
    ours, theirs = {"concurrency": args.concurrency}, {"durability": lg.durability}
    try:
        with rig_bench.celery_worker(queue, args.concurrency, workdir / "w.log", key, extra) as w:
            rig = rig_bench.Rig(w, key, "notify", 0.001)
            rig_bench._redis().delete(key)
            sequential(rig, args.warmup, offset=-args.warmup)
            lg("seq", args.warmup)
            print(f"sequential, in turn by blocks of {args.block} ...", flush=True)
            parts = [(sequential(rig, b, offset=n), lg("seq", b)) for b in blocks(n, args.block)]
            ours["seq"], theirs["seq"] = (merged(side) for side in zip(*parts, strict=True))
            print("bursts: ours, LangGraph's, LangGraph's, ours ...", flush=True)
            parts = [burst(rig, n, offset=2 * n), lg("burst", n), lg("burst", n)]
            ours["burst"] = merged([parts[0], burst(rig, n, offset=3 * n)])
            theirs["burst"] = merged(parts[1:])
            if args.approve:
                print("approve → done, in turn by blocks ...", flush=True)
                hold_last(True)
                try:
                    approve_to_done(rig, min(3, args.approve), offset=-100)  # warm-up
                    lg("approve", min(3, args.approve))
                    parts = [
                        (approve_to_done(rig, b, offset=4 * n), lg("approve", b))
                        for b in blocks(args.approve, args.block)
                    ]
                    ours["approve"], theirs["approve"] = (
                        merged(s) for s in zip(*parts, strict=True)
                    )
                finally:
                    hold_last(False)
    finally:
        lg.close()
    profiled = workdir / "worker.prof"
    if args.profile:
        print("ours: a worker profiling its tasks, sequential chains ...", flush=True)
        extra[rig_bench.PROFILE_ENV] = str(profiled)
        with rig_bench.celery_worker(queue, args.concurrency, workdir / "p.log", key, extra) as w:
            rig = rig_bench.Rig(w, key, "notify", 0.001)
            sequential(rig, rig_bench.PROFILE_SKIP // HOPS, offset=-1000)  # not profiled
            sequential(rig, n, offset=5 * n)
    print_in_process(*pieces[:4])
    print_comparison(n, ours, theirs)
    print_stages(ours)
    check_chains(ours["seq"]["contexts"] + ours["burst"]["contexts"])
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if rig_bench.flush_hint():
        print(f"\nWARNING: the figures may be wrong{rig_bench.flush_hint()}.", file=sys.stderr)
    if pieces[4] is not None:
        common.print_profile(pieces[4], "cProfile (CPU time), chains in process", args.top)
    if profiled.exists():
        title = f"cProfile (thread CPU time) of the worker's tasks, {n} sequential chains"
        common.print_profile(str(profiled), title, args.top)


if __name__ == "__main__":
    main()
