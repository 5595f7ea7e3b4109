"""Load (issue 18): a thousand approvals pending at once, then approved in bursts, while partner
tasks arrive at a fixed rate through the A2A API — on the host's real processes (web, two
workers, beat, watcher, an MCP server over streamable HTTP; tests/faults/harness.py starts them,
with a redis-server of its own) and PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/mcplet_load SECRET_KEY=bench \\
        .venv/bin/python bench/load.py [--pending 1000] [--minutes 3] [--rate 2] [--burst 50]
        [--web-processes N]

The web is daphne's one process, or with `--web-processes N` `manage.py serve` with N processes
(compose's web): run it once per N to compare approvals/s.

Prints, per window of `--window` seconds, the count and p50/p95/p99 of each request kind
(partner POST /a2a/tasks, partner GET of a task, approval = challenge + assertion, a partner
task end to end, approval to execution), then throughput, each process's memory (RSS) at start
and end, the database's growth per workflow, and the invariants of the fault harness (no call
run twice, none lost, none run unapproved, every request answered, audit chain intact). The
database named by DATABASE_URL is created if missing and emptied first.
"""

import argparse
import collections
import concurrent.futures
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common, web  # noqa: E402

KINDS = ("partner POST", "partner GET", "approval", "task end to end", "approved → executed")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=1000, help="approvals held at once")
    parser.add_argument("--minutes", type=float, default=3, help="how long the load runs")
    parser.add_argument("--rate", type=float, default=2, help="partner tasks per second")
    parser.add_argument("--burst", type=int, default=50, help="approvals per burst")
    parser.add_argument("--every", type=float, default=5, help="seconds between bursts")
    parser.add_argument("--approvers", type=int, default=8, help="approvals sent at once")
    parser.add_argument("--window", type=float, default=30, help="seconds per figures row")
    parser.add_argument(
        "--web-processes",
        type=int,
        default=None,
        help="serve the web with manage.py serve and this many processes (default: daphne)",
    )
    parser.add_argument(
        "--solo",
        type=int,
        default=0,
        help="first, this many approvals one after the other with no other traffic: the web's "
        "CPU per approval",
    )
    return parser.parse_args(argv)


class Timings:
    def __init__(self):
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.samples = collections.defaultdict(list)  # kind -> [(at, seconds)]

    def add(self, kind, seconds, at=None):
        with self.lock:
            self.samples[kind].append(((at or time.monotonic()) - self.started, seconds))

    def table(self, window):
        end = max((at for rows in self.samples.values() for at, _ in rows), default=0)
        print(f"\n{'window':>9} {'kind':<22} {'n':>6} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
        start = 0.0
        while start <= end:
            for kind in KINDS:
                rows = [s for at, s in self.samples[kind] if start <= at < start + window]
                if rows:
                    print(
                        f"{f'{start:.0f}-{start + window:.0f}s':>9} {kind:<22} {len(rows):>6} "
                        + " ".join(f"{percentile(rows, q) * 1000:>8.0f}" for q in (50, 95, 99))
                    )
            start += window


def percentile(values, q):
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def rss_mb(process):
    """The process's resident memory with its children's (the web's processes)."""
    return web.tree_rss_mb(process.pid) if process.poll() is None else float("nan")


def memory(chaos):
    return {name: rss_mb(s.process) for name, s in chaos.services.items()}


def database_size():
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        return cursor.fetchone()[0]


def main(argv=None):
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="mcplet-load-"))
    common.setup_django(
        workdir,
        flush=(
            "pools.Pool",
            "pools.McpServer",
            "agents.Agent",
            "agents.AgentRun",
            "a2a.A2AMessage",
            "held.Ceremony",
            "passkey.PasskeyCredential",
            "mcplet_host.AuditEvent",
            "mcplet_host.AuditChainHead",  # else the next event continues the old chain
            "auth.User",
        ),
    )
    import httpx

    from a2a import messages
    from a2a.models import A2AMessage
    from agents.models import AgentRun
    from held.models import Ceremony
    from mcplets.examples.programmable import write_spec
    from tests.conftest import make_registry, reference_tools
    from tests.faults.harness import Chaos, partner_key, write_script

    write_script(workdir / "chaos.json")
    spec = write_spec(workdir / "tools.json", reference_tools())
    chaos = Chaos(
        workdir,
        None,
        common.approver_session(),
        common.synced_passkey(),
        spec,
        web_processes=args.web_processes,
    )
    chaos.services["mcp"].start()
    registry = make_registry({"transport": "http", "url": chaos.mcp_url})
    for pool in ("info-pool", "media-pool"):
        registry[pool].rate_limit_per_minute = 10**6
        registry[pool].save()
    for agent in ("dispatch", "info", "planning"):
        registry[agent].model = "scripted/chaos"
        registry[agent].save()
    partner = registry["partner"]
    partner.callable_agents.set([registry["dispatch"], registry["info"]])
    partner.accessible_pools.set([registry["media-pool"], registry["info-pool"]])
    chaos.partner = partner_key(partner)
    timings = Timings()
    auth = {"Authorization": f"Bearer {chaos.partner.raw_key}"}

    def post(agent_id):
        body = messages.task_request(partner.agent_id, agent_id, {"store": "shinjuku"})
        began = time.monotonic()
        answer = httpx.post(f"{chaos.base}/a2a/tasks", json=body, headers=auth, timeout=60)
        timings.add("partner POST", time.monotonic() - began)
        answer.raise_for_status()
        chaos.requests.append(body["messageId"])
        return body["messageId"], began

    with chaos:
        served = web.describe(args.web_processes) if args.web_processes else "daphne"
        print(f"processes up (web: {served}); memory at start (MB): {fmt(memory(chaos))}")
        size_before, memory_before = database_size(), memory(chaos)

        # 1. The held runs: each dispatch task waits on one approval, holding no worker.
        began = time.monotonic()
        held = [post("dispatch-agent")[0] for _ in range(args.pending)]
        waiting = AgentRun.objects.filter(
            request__message_id__in=held, status=AgentRun.Status.AWAITING_APPROVAL
        )
        while waiting.count() < args.pending:
            time.sleep(1)
        print(
            f"{args.pending} approvals pending after {time.monotonic() - began:.0f} s "
            f"({args.pending / (time.monotonic() - began):.1f} held tasks/s)"
        )
        memory_held = memory(chaos)  # what the first work loaded (the SDKs, litellm) is in
        if args.solo:
            solo_approvals(chaos, args.solo)

        # 2. For --minutes: bursts of approvals (oldest first), and partner tasks at a fixed rate
        # to the information agent (a tool call, an answer: no approval), polled until answered.
        stop = time.monotonic() + args.minutes * 60
        partner_tasks = []

        def partner_traffic():
            while time.monotonic() < stop:
                next_at = time.monotonic() + 1 / args.rate
                partner_tasks.append(post("info-gathering-agent"))
                time.sleep(max(0, next_at - time.monotonic()))

        def approve(ceremony):
            t0 = time.monotonic()
            chaos.approver.decide(ceremony, reject=False)
            if time.monotonic() < stop:
                timings.add("approval", time.monotonic() - t0)

        # Approvers at --approvers screens at once: one approver alone (about 2.5 a second) was
        # the bottleneck, not the host.
        approving = concurrent.futures.ThreadPoolExecutor(args.approvers)
        submitted = set()
        traffic = threading.Thread(target=partner_traffic)
        traffic.start()
        open_tasks, seen, next_burst = {}, 0, time.monotonic()
        while time.monotonic() < stop or traffic.is_alive() or open_tasks:
            for message_id, sent_at in partner_tasks[seen:]:
                open_tasks[message_id] = sent_at
                seen += 1
            if time.monotonic() >= next_burst and time.monotonic() < stop:
                next_burst += args.every
                pending = Ceremony.objects.pending().exclude(token__in=submitted)
                for ceremony in pending.order_by("created_at")[: args.burst]:
                    submitted.add(ceremony.token)
                    approving.submit(approve, ceremony)
            for message_id in list(open_tasks)[:50]:
                t0 = time.monotonic()
                got = httpx.get(f"{chaos.base}/a2a/tasks/{message_id}", headers=auth, timeout=60)
                timings.add("partner GET", time.monotonic() - t0)
                if got.status_code == 200:
                    timings.add("task end to end", time.monotonic() - open_tasks.pop(message_id))
            if time.monotonic() > stop + 300:
                print(f"{len(open_tasks)} partner tasks still open 5 minutes after the load")
                break
            time.sleep(0.5)
        traffic.join()
        approving.shutdown(cancel_futures=True)  # the bursts past the load's end are dropped
        # Approvals per second while approvals were under way (first sent to last answered):
        # with --pending too small for the bursts they end before the load does.
        approvals = timings.samples["approval"]
        first = min((at - s for at, s in approvals), default=0)
        last = max((at for at, _ in approvals), default=0)
        during = [s for at, s in timings.samples["partner POST"] if first <= at - s and at <= last]

        # Let what was approved finish before the figures.
        deadline = time.monotonic() + 300
        busy = Ceremony.objects.filter(
            status__in=(Ceremony.Status.APPROVED, Ceremony.Status.EXECUTING)
        )
        while busy.exists() and time.monotonic() < deadline:
            time.sleep(1)
        for decided, executed in Ceremony.objects.filter(
            status=Ceremony.Status.EXECUTED, executed_at__isnull=False
        ).values_list("decided_at", "executed_at"):
            timings.add("approved → executed", (executed - decided).total_seconds())
        memory_after = memory(chaos)
        elapsed = time.monotonic() - timings.started
        answered = A2AMessage.objects.filter(type=A2AMessage.Type.TASK_RESPONSE).count()
        workflows = AgentRun.objects.count()
        timings.table(args.window)
        if approvals and during:
            print(
                f"\napprovals (challenge + assertion): {len(approvals)} in {last - first:.0f} s "
                f"({len(approvals) / (last - first):.2f}/s; {len(chaos.approver.approved)} "
                f"answered 200), p50 {percentile([s for _, s in approvals], 50) * 1000:.0f} ms; "
                f"partner POST p50 {percentile(during, 50) * 1000:.0f} ms meanwhile "
                f"(web: {served})"
            )
        print(
            f"\nthroughput: {answered} task responses in {elapsed:.0f} s "
            f"({answered / elapsed:.2f}/s); executed calls {len(chaos.executions()[0])}; "
            f"still pending approvals {Ceremony.objects.pending().count()}"
        )
        print(f"memory at start (MB):        {fmt(memory_before)}")
        print(f"memory, approvals held (MB): {fmt(memory_held)}")
        print(f"memory at end (MB):          {fmt(memory_after)}")
        grown = database_size() - size_before
        print(
            f"database grew {grown / 2**20:.1f} MB for {workflows} workflows "
            f"({grown / max(workflows, 1) / 1024:.1f} KB per workflow)"
        )
        chaos.check(chaos.requests, "load")
        print(common.invariants(chaos.tally))


def solo_approvals(chaos, n):
    """`n` approvals one after the other with nothing else sent to the web: its CPU (all its
    processes) per approval, a challenge and an assertion each."""
    from held.models import Ceremony

    pending = list(Ceremony.objects.pending().order_by("created_at")[:n])
    web_pid = chaos.services["web"].process.pid
    cpu, began = web.tree_cpu_seconds(web_pid), time.monotonic()
    for ceremony in pending:
        chaos.approver.decide(ceremony, reject=False)
    cpu, wall = web.tree_cpu_seconds(web_pid) - cpu, time.monotonic() - began
    print(
        f"{len(pending)} approvals alone, one after the other: {wall / len(pending) * 1000:.0f} ms "
        f"each, the web's CPU {cpu / len(pending) * 1000:.1f} ms per approval"
    )


def fmt(sizes):
    return ", ".join(f"{name} {mb:.0f}" for name, mb in sizes.items())


if __name__ == "__main__":
    main()
