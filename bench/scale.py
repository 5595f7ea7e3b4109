"""Scale-out (issue 26): the reference restaurant scenario, K at a time, on the host's real
processes — web (`manage.py serve`), Celery workers, beat, the watcher, on PostgreSQL and a
redis-server of their own (tests/faults/harness.py starts them) — with the eight reference
MCPlets and their backing service over streamable HTTP (`python -m mcplets.restaurant`), for
each configuration of a matrix of worker and web process counts, each a fresh start.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/mcplet_bench_scale SECRET_KEY=bench \\
        .venv/bin/python bench/scale.py [--workers 1,2] [--web-processes 1,2]
        [--concurrency 4] [--minutes 2 | --scenarios N] [--timeout 180]

One scenario is bench/scenario.py's, as beat would start it: `agents.run_director` queued to the
workers (one Director cycle at a time, as the host's singleton lock wants: the benchmark waits
for a cycle's task request and lock before it queues the next), then the information and
planning agents; the store manager approves the plan and then the e-mail through the real
passkey views (challenge, then an assertion from a software passkey, over HTTP to the web); the
mail MCPlet has the web's /auth/verify-assertion confirm it and the backing service sends one
e-mail per at-risk guest (10) into its outbox. A scenario is complete when the e-mail call is
executed, the dispatch run succeeded and every recipient's message is in the outbox (matched by
Message-ID); one that is not within --timeout is counted as failed, with where it stopped. The
benchmark looks at the database every 0.1 s (0.02 s for the Director's task), so a stage's
figure may be up to that late; its approvals come at once.

Per configuration: scenarios per minute, the p50/p95 of one scenario (Director queued → e-mails
sent) and of its stages, and CPU seconds per scenario of the host's processes (web, workers,
beat, watcher) against the MCP servers (the eight MCPlets, the backing service, its SMTP sink):
the host share is host / (host + MCP). The scripted model runs inside the workers, so it is in
the host's figure (bench/scenario.py splits it out: about 0.014 s of a scenario). Redis, this
benchmark (the approver, the polling) and how busy the whole machine was are shown beside;
PostgreSQL is not (its server is shared). Then the harness's invariants (no approved call lost,
none run twice or unapproved, every request answered once, nothing stuck, audit chain intact;
the e-mails of each call in the outbox once), and a last table with each configuration's ratios
to the first. The workers run the harness's command (threads pool, 4 each); sweeps, leases and
tool timeouts are the production defaults, not the fault harness's short ones.
"""

import argparse
import collections
import concurrent.futures
import contextlib
import io
import itertools
import os
import secrets
import socket
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common, scenario, web  # noqa: E402

PRODUCTION = {"MCPLET_TOOL_TIMEOUT": "30", "MCPLET_RUN_LEASE": "300", "MCPLET_RECOVERY_GRACE": "60"}
DIRECTOR = "director"
STAGES = ("Director queued → plan held", "plan held → e-mail held", "e-mail held → sent")
POLL = 0.1  # seconds between this benchmark's looks at the database
GROUPS = {
    "web": ("web",),
    "workers": ("worker",),
    "beat": ("beat",),
    "watcher": ("watcher",),
    "MCP": ("mcp",),
    "redis": ("redis",),
}
HOST = ("web", "workers", "beat", "watcher")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2", help="worker process counts")
    parser.add_argument("--web-processes", default="1,2", help="web process counts")
    parser.add_argument("--concurrency", type=int, default=4, help="scenarios in flight")
    parser.add_argument("--minutes", type=float, default=2, help="measured time per config")
    parser.add_argument("--scenarios", type=int, default=0, help="or: this many per config")
    parser.add_argument("--warmup", type=int, default=0, help="untimed first (default: K)")
    parser.add_argument("--timeout", type=float, default=180, help="seconds one scenario may take")
    args = parser.parse_args(argv)
    args.workers = [int(n) for n in args.workers.split(",")]
    args.web_processes = [int(n) for n in args.web_processes.split(",")]
    args.warmup = args.warmup or args.concurrency
    if min(args.workers + args.web_processes + [args.concurrency]) < 1:
        common.refuse("process counts and --concurrency must be at least 1")
    return args


def free_ports(count):
    """`count` consecutive free ports on loopback."""
    for base in range(20000 + secrets.randbelow(20000), 65000, 97):
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + count):
                    stack.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise RuntimeError("no free port range")


def message_ids(path):
    with open(path, encoding="utf-8", errors="replace") as message:
        for line in message:
            if line.lower().startswith("message-id:"):
                return line.split(":", 1)[1].strip()
            if not line.strip():
                return ""
    return ""


class Outbox:
    """The backing service's .eml files, read once each: Message-ID → how many files."""

    def __init__(self, path):
        self.path, self.seen, self.ids = path, set(), collections.Counter()
        self.lock = threading.Lock()

    def refresh(self):
        with self.lock:
            for path in self.path.glob("*.eml") if self.path.exists() else ():
                if path.name not in self.seen:
                    self.seen.add(path.name)
                    self.ids[message_ids(path)] += 1
            return self.ids


def sent_ids(result):
    """The Message-IDs the send_email call's result names (wherever the envelope puts them)."""
    if isinstance(result, dict):
        found = [result["messageId"]] if isinstance(result.get("messageId"), str) else []
        return found + [i for value in result.values() for i in sent_ids(value)]
    if isinstance(result, list):
        return [i for value in result for i in sent_ids(value)]
    return []


def make_bench(workers, mcplets_port, backend_port, outbox):
    """The fault harness's Chaos with `workers` workers and the reference MCPlets as its MCP
    server, production timings, and the outbox as the ground truth of what was sent."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    from held.models import Ceremony
    from tests.faults.harness import Chaos, Service

    class Bench(Chaos):
        def __init__(self, workdir, tokens, web_processes):
            spec = workdir / "unused.json"  # the programmable MCP server is replaced
            session, passkey = common.approver_session(), common.synced_passkey()
            super().__init__(workdir, None, session, passkey, spec, web_processes)
            first = self.services["worker1"]
            services = {}
            for name, service in self.services.items():
                service.env = {**service.env, **PRODUCTION}
                if name == "mcp":
                    env = {**service.env, **tokens, "RESTAURANT_OUTBOX": str(outbox)}
                    env["MCPLET_VERIFY_URL"] = f"{self.base}/auth/verify-assertion"
                    env.pop("SMTP_HOST", None)
                    command = [sys.executable, "-m", "mcplets.restaurant", "--backend"]
                    command += ["--base-port", str(mcplets_port)]
                    command += ["--backend-port", str(backend_port)]
                    log = workdir / "mcplets.log"
                    services[name] = Service(name, command, log, env, mcplets_port + 7)
                elif name == "worker1":
                    for i in range(1, workers + 1):
                        command = [*first.command[:-1], f"w{i}@%h"]
                        log = workdir / f"worker{i}.log"
                        services[f"worker{i}"] = Service(
                            f"worker{i}", command, log, service.env, ready="ready."
                        )
                elif not name.startswith("worker"):
                    services[name] = service
                if name == "watcher":  # its default --poll, as compose runs it
                    service.command = service.command[: service.command.index("--poll")]
            self.services = services
            self.outbox = Outbox(outbox)

        def __enter__(self):
            super().__enter__()
            # The harness sweeps every second (faults); the host's migrations every 30 s.
            every, _ = IntervalSchedule.objects.get_or_create(every=30, period="seconds")
            for task in PeriodicTask.objects.filter(interval__every=1, interval__period="seconds"):
                task.interval = every
                task.save()
            return self

        def executions(self):
            """Ground truth from the outbox: a send_email call ran if its messages are there;
            a message no executed call names (a second run of one) is unkeyed."""
            ids = self.outbox.refresh()
            owner = {}
            for ceremony in Ceremony.objects.filter(tool_name="send_email"):
                for message_id in sent_ids(ceremony.result):
                    owner[message_id] = ceremony.token
            keys = collections.Counter({owner[i]: 1 for i in ids if i in owner})
            unkeyed = [i for i, n in ids.items() for _ in range(n) if i not in owner or n > 1]
            return keys, unkeyed

    return Bench


class Driver:
    """K scenario threads against one started configuration."""

    def __init__(self, bench, timeout):
        self.bench, self.timeout = bench, timeout
        self.director_lock = threading.Lock()
        self.claimed = set()
        self.lock_key = f"mcplet:lock:director:{DIRECTOR}"

    def start_cycle(self):
        """Queue one Director cycle as beat does; its context once its task request exists and
        its lock is released (the next cycle would be skipped while it is held)."""
        import redis
        from django.db import connection

        from a2a.models import A2AMessage
        from mcplet_host.celery import app

        broker = f"redis://127.0.0.1:{self.bench.redis_port}/0"
        with self.director_lock:
            with app.connection_for_write(broker) as conn:
                app.send_task("agents.run_director", [DIRECTOR], connection=conn)
            requests = A2AMessage.objects.filter(
                sender_id=DIRECTOR, type=A2AMessage.Type.TASK_REQUEST
            ).exclude(context_id__in=self.claimed)
            first = requests.values_list("context_id", flat=True).first
            context = self.until(first, every=0.02)
            self.claimed.add(context)
            held = redis.Redis(port=self.bench.redis_port)
            self.until(lambda: not held.exists(self.lock_key), every=0.02)
            connection.close_if_unusable_or_obsolete()
        return context

    def until(self, probe, what="the Director's task request", every=POLL):
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if value := probe():
                return value
            time.sleep(every)
        raise scenario.Failed(f"{what} did not come within {self.timeout:.0f} s")

    def held(self, context, what):
        from held.models import Ceremony

        pending = Ceremony.objects.filter(trace_id=context, status=Ceremony.Status.PENDING)
        with contextlib.suppress(scenario.Failed):
            return self.until(pending.first, what)
        return scenario.pending(context, what)  # Failed, saying where the runs stand

    def approve(self, ceremony):
        self.bench.approver.decide(ceremony, reject=False)
        if ceremony.token not in self.bench.approver.approved:
            raise scenario.Failed(f"the approval of {ceremony} was refused")

    def run(self):
        """One scenario: its stages' seconds, or Failed."""
        from agents.models import AgentRun

        began = time.monotonic()
        context = self.start_cycle()
        plan = self.held(context, "the plan")
        marks = [time.monotonic()]
        self.approve(plan)
        email = self.held(context, "the e-mail")
        marks.append(time.monotonic())
        self.approve(email)
        dispatch = AgentRun.objects.filter(context_id=context, agent__agent_id="dispatch-agent")

        def done():
            email.refresh_from_db()
            status = dispatch.values_list("status", flat=True).first()
            return email.is_final and status in AgentRun.FINAL

        self.until(done, "the end of the dispatch run")
        end = time.monotonic()
        ids = self.bench.outbox.refresh()  # the sink wrote each message before it answered
        sent = sum(1 for i in set(sent_ids(email.result)) if ids.get(i))
        scenario.check(SimpleNamespace(context_id=context), email, sent)
        stages = (marks[0] - began, marks[1] - marks[0], end - marks[1])
        return {"total": end - began, **dict(zip(STAGES, stages, strict=True))}

    def contexts(self):
        return set(self.claimed)


def cpu(bench):
    """CPU seconds so far of each group of the harness's processes, this benchmark's own, and
    the machine's busy and total ticks."""
    figures = dict.fromkeys(GROUPS, 0.0)
    for name, service in bench.services.items():
        group = next(g for g, prefixes in GROUPS.items() if name.startswith(prefixes))
        if service.process and service.process.poll() is None:
            figures[group] += web.tree_cpu_seconds(service.process.pid)
    figures["bench"] = common.cpu_seconds()
    figures["machine"] = web.machine_busy()
    return figures


def phase(driver, count=None, seconds=None, concurrency=4):
    """Scenarios K at a time until `count` started or `seconds` passed: (results, failures,
    elapsed)."""
    from django.db import connection

    results, failures, lock = [], [], threading.Lock()
    started = itertools.count()
    began = time.monotonic()

    def loop():
        try:
            while True:
                if count is not None and next(started) >= count:
                    return
                if seconds is not None and time.monotonic() - began >= seconds:
                    return
                try:
                    outcome = driver.run()
                except scenario.Failed as failure:
                    with lock:
                        failures.append(str(failure))
                else:
                    with lock:
                        results.append(outcome)
        finally:
            connection.close()

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(loop) for _ in range(concurrency)]:
            future.result()
    return results, failures, time.monotonic() - began


def configuration(args, workers, web_processes):
    """A fresh start of the host with these counts; its figures."""
    from django.core.management import call_command

    from a2a.models import A2AMessage
    from passkey.models import VERIFY_KEY_PREFIX
    from pools.discovery import discover
    from pools.models import McpServer, Pool
    from tests.faults.harness import _listening as listening
    from tests.processes import wait_until

    with common.scratch(f"mcplet-scale-{workers}x{web_processes}-") as workdir:
        common.flush_tables(scenario.TABLES)
        tokens = {
            f"RESTAURANT_{name}_VERIFY_TOKEN": VERIFY_KEY_PREFIX + secrets.token_urlsafe(32)
            for name in ("MAIL", "SNS")
        }
        os.environ.update(tokens)
        mcplets_port = free_ports(9)
        backend_url = f"http://127.0.0.1:{mcplets_port + 8}"
        script = scenario.SCRIPT.read_text(encoding="utf-8")
        (workdir / "reference.yaml").write_text(
            script.replace(scenario.SCRIPT_API_URL, backend_url), encoding="utf-8"
        )
        call_command(
            "seed_reference", http=True, base_port=mcplets_port, api_url=backend_url,
            stdout=io.StringIO(),
        )  # fmt: skip
        Pool.objects.update(rate_limit_per_minute=1_000_000)
        Bench = make_bench(workers, mcplets_port, mcplets_port + 8, workdir / "outbox")
        bench = Bench(workdir, tokens, web_processes)
        (mcp := bench.services["mcp"]).start()
        for port in range(mcplets_port, mcplets_port + 9):
            wait_until(lambda port=port: listening(port), f"port {port}", mcp.process)
        servers = McpServer.objects.filter(name__startswith="restaurant-")
        accepted = sum(discover(server).accepted for server in servers)
        with bench:
            label = f"{workers} worker{'s' * (workers > 1)} × {web.describe(web_processes)}"
            print(
                f"\n== {label}: up ({accepted} MCPlets accepted); load average "
                f"{os.getloadavg()[0]:.2f}; {args.warmup} warm-up scenarios ...",
                flush=True,
            )
            driver = Driver(bench, args.timeout)
            _, warm_failures, _ = phase(driver, count=args.warmup, concurrency=args.concurrency)
            before, load = cpu(bench), os.getloadavg()[0]
            results, failures, elapsed = phase(
                driver,
                count=args.scenarios or None,
                seconds=None if args.scenarios else args.minutes * 60,
                concurrency=args.concurrency,
            )
            after = cpu(bench)
            sent = list(
                A2AMessage.objects.filter(
                    context_id__in=driver.contexts(), type=A2AMessage.Type.TASK_REQUEST
                ).values_list("message_id", flat=True)
            )
            bench.check(sent, label)
            return report(
                label, results, warm_failures + failures, elapsed, before, after, load, bench
            )


def report(label, results, failures, elapsed, before, after, load, bench):
    done = len(results)
    per_minute = done / elapsed * 60
    spent = {k: after[k] - before[k] for k in (*GROUPS, "bench")}
    busy, total = (a - b for a, b in zip(after["machine"], before["machine"], strict=True))
    host = sum(spent[g] for g in HOST)
    share = host / (host + spent["MCP"]) if host + spent["MCP"] else float("nan")
    print(
        f"{done} scenarios complete in {elapsed:.0f} s: {per_minute:.1f} per minute; "
        f"{len(failures)} did not complete (warm-up included); machine busy {busy / total:.0%} "
        f"(load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end)"
    )
    for reason, n in collections.Counter(failures).most_common(5):
        print(f"  not complete ×{n}: {reason[:300]}")
    print(f"  {'seconds per scenario':<32} {'p50':>7} {'p95':>7}")
    for key in ("total", *STAGES):
        figures = common.stats([r[key] for r in results])
        print(f"  {key:<32} {figures['median']:7.2f} {figures['p95']:7.2f}")
    per = {k: v / max(done, 1) * 1000 for k, v in spent.items()}
    print(
        "  CPU ms per scenario: "
        + ", ".join(f"{k} {per[k]:.0f}" for k in (*GROUPS, "bench"))
        + f"; host {host / max(done, 1) * 1000:.0f} → host share {share:.0%} of host + MCP"
    )
    print(
        "  "
        + common.invariants(bench.tally)
        + f"; e-mails in the outbox {sum(bench.outbox.ids.values())}"
    )
    return {
        "per_minute": per_minute,
        "p50": common.stats([r["total"] for r in results])["median"],
        "host_ms": host / max(done, 1) * 1000,
        "share": share,
        "failed": len(failures),
        "busy": busy / total,
    }


def main(argv=None):
    args = parse_args(argv)
    os.environ["MCPLET_LLM_MODEL"] = "scripted/reference"
    with common.scratch("mcplet-scale-") as workdir:
        common.setup_django(workdir, flush=scenario.TABLES)
        print(
            f"database: {common.describe_database()}; {os.cpu_count()} CPUs; load average "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.concurrency} scenarios in "
            f"flight, "
            + (
                f"{args.scenarios} per configuration"
                if args.scenarios
                else f"{args.minutes:g} min each"
            )
        )
        figures = {}
        for workers, web_processes in itertools.product(args.workers, args.web_processes):
            figures[(workers, web_processes)] = configuration(args, workers, web_processes)
    print_ratios(figures)


def print_ratios(figures):
    first_key = next(iter(figures))
    first = figures[first_key]
    workers, web_processes = first_key
    print(
        f"\nBy configuration (ratios to {workers} worker{'s' * (workers > 1)} × "
        f"{web_processes} web process{'es' * (web_processes > 1)}):"
    )
    print(
        f"  {'workers × web':<14} {'per min':>8} {'p50 s':>7} {'host ms':>8} {'share':>6} "
        f"{'busy':>5} {'failed':>6} {'×per min':>9} {'×p50':>6} {'×host ms':>9}"
    )
    for (workers, web_processes), f in figures.items():
        print(
            f"  {f'{workers} × {web_processes}':<14} {f['per_minute']:>8.1f} {f['p50']:>7.2f} "
            f"{f['host_ms']:>8.0f} {f['share']:>6.0%} {f['busy']:>5.0%} {f['failed']:>6} "
            f"{f['per_minute'] / first['per_minute']:>9.2f} {f['p50'] / first['p50']:>6.2f} "
            f"{f['host_ms'] / first['host_ms']:>9.2f}"
        )


if __name__ == "__main__":
    main()
