"""Partner A2A endpoint benchmark: requests per second of refused, forbidden and accepted task
submissions beside a trivial authenticated endpoint, against the real server.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/mcplet_bench \\
    REDIS_URL=redis://127.0.0.1:6379/0 SECRET_KEY=bench .venv/bin/python bench/a2a_endpoint.py \\
        [--web-processes 1,2] [--seconds 10] [--clients 16] [--warmup 2] [--rate 1000000/min]
        [--worker] [--profile [--requests 300] [--top 20]]

The server is the real ASGI application, `manage.py serve` (uvicorn) with each of
`--web-processes` in turn ("daphne" in the list: daphne's one process, what compose ran before),
on PostgreSQL and Redis, with MCPLET_PARTNER_RATE=--rate so the partner is never throttled. It
loads `bench.web_asgi:application`, which points the Celery app at the private queue, sets
CONN_MAX_AGE and the dashboard's broadcast as asked, in each of its processes. `--clients`
concurrent clients (asyncio + httpx, keep-alive connections) send one kind of request each for
`--seconds` (after `--warmup` untimed seconds), and the script prints requests/s, the median,
p95 and mean latency, the CPU the server used per request (all its processes: uvicorn's
supervisor and workers) and the ratios to the trivial endpoint; then, across process counts,
each kind's requests/s and CPU per request beside the first count's (the ratio). The kinds:

- trivial: `GET /a2a/agents/bench-echo` (200), a card: authentication (key look-up and its
  last_used_at UPDATE), the throttle (Redis), one SELECT, the audit event. There is no lighter
  authenticated DRF endpoint in the server: every partner view does the same first steps.
- refused: `POST /a2a/tasks` with a well-formed but unknown key (401): one SELECT, the audit
  event.
- forbidden: a valid task to `bench-private`, an internal agent the partner may not call (403).
- accepted: a valid task (a fresh messageId each time) to `bench-echo`, which the partner may
  call. The server runs with MCPLET_A2A_WAIT=0 and no worker, so "accepted" is persisted,
  signed, queued to Redis and answered 202 at once: the endpoint's own cost, not a run's.
- accepted JSON-RPC: the same task as an A2A 1.0 JSON-RPC `SendMessage` to `/a2a/v1/bench-echo`
  (the standard binding: the A2A schema checked, the message mapped to §18, the same code path),
  answered with the Task (state submitted).
- trivial (again): the first kind once more, to show drift from the growing tables.

With `--worker`, a second server (MCPLET_A2A_WAIT=5) and a Celery worker whose `bench-echo`
handler (`bench.common.Echo`, no LLM) finishes each run at once add a row "answered":
accepted tasks that the worker runs and the server answers 200 with the response, and
"answered JSON-RPC", the same through SendMessage (the completed Task with its artifact).

Then, in this process (Django's test client, no HTTP), one request of each kind runs under
CaptureQueriesContext and its SQL is listed; `--profile` adds a cProfile of `--requests`
sequential requests of each kind.

The published `agents.deliver` tasks travel on a private queue (deleted at the end), so no other
worker on the same Redis takes them. The database is DATABASE_URL's with `_a2a` appended to its
name (`mcplet_bench_a2a`; created if missing, migrated), because the agents, A2A and audit tables
are cleared at the start and another benchmark may be using `mcplet_bench` meanwhile. Nothing is
asserted: it is a benchmark.
"""

import argparse
import asyncio
import contextlib
import json
import logging
import os
import pstats
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.common

from bench import common, in_process, web
from tests.processes import stop

PARTNER, ECHO, PRIVATE = "bench-partner", "bench-echo", "bench-private"
HANDLER = "bench.common.Echo"
UNKNOWN_KEY = "mcpk_" + "0" * 43  # the shape of a real key; no key has this prefix


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--web-processes",
        type=web.parse_processes,
        default=[1],
        help="the server's process counts, one server each in turn, e.g. 1,2 or daphne,1,2; a "
        "count repeated (1,2,1,2) runs again, to see the drift of a busy machine (default: 1)",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="timed seconds per kind")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients")
    parser.add_argument("--warmup", type=float, default=2.0, help="untimed seconds per kind")
    parser.add_argument(
        "--rate",
        default="1000000/min",
        help="MCPLET_PARTNER_RATE of the server (default: %(default)s). DRF keeps one timestamp "
        "per request of the window in the cache, read and written whole at each request.",
    )
    parser.add_argument(
        "--conn-max-age",
        default="0",
        help="the server's CONN_MAX_AGE: seconds, or 'settings' for the settings' own "
        "(DB_CONN_MAX_AGE, 0 unless set). Under ASGI every request runs in a thread of its "
        "own, so a persistent connection is one per request, left open: with 60 the server "
        "exhausts PostgreSQL's max_connections in seconds (default: %(default)s)",
    )
    parser.add_argument(
        "--db-pool",
        help="the server's DB_POOL_MAX_SIZE: PostgreSQL connections each process keeps in a pool "
        "(0: none, a new connection per request; default: what `serve` sets)",
    )
    parser.add_argument(
        "--without-broadcast",
        action="store_true",
        help="disconnect the dashboard's broadcast of each audit event (a Redis channel-layer "
        "group_send per request) in the server, to measure its share",
    )
    parser.add_argument("--worker", action="store_true", help="also measure answered tasks")
    parser.add_argument("--keep", action="store_true", help="keep the server and worker logs")
    parser.add_argument("--profile", action="store_true", help="cProfile each kind in process")
    parser.add_argument(
        "--server-profile",
        action="store_true",
        help="then, for each kind, a server of its own under cProfile (every thread: the event "
        "loop and each request's thread), loaded for --seconds; prints its hot spots",
    )
    parser.add_argument("--requests", type=int, default=300, help="--profile: requests per kind")
    parser.add_argument("--top", type=int, default=20, help="--profile: rows per profile")
    return parser.parse_args(argv)


# --- set-up -----------------------------------------------------------------------------------


def own_database(url):
    """DATABASE_URL's server with a database of this benchmark's own (`<name>_a2a`): it clears
    tables, which must not be those another benchmark is using at the same time."""
    parts = urlsplit(url)
    name = parts.path.lstrip("/") or "mcplet_bench"
    return urlunsplit(parts._replace(path=f"/{name}_a2a"))


def setup_database():
    """Migrate, clear the agents (their many-to-many tables cascade), A2A and audit tables; the
    partner, its key, two agents."""
    agents = ("agents.AgentRun", "a2a.A2AMessage", "a2a.PartnerKey", "agents.Agent")
    common.setup_django(flush=(*agents, "mcplet_host.AuditEvent", "mcplet_host.AuditChainHead"))
    from a2a.models import PartnerKey
    from agents.models import Agent

    partner = Agent.objects.create(
        agent_id=PARTNER, display_name="Bench partner", kind=Agent.Kind.EXTERNAL
    )
    echo = Agent.objects.create(
        agent_id=ECHO, display_name="Bench echo", kind=Agent.Kind.INTERNAL, handler=HANDLER
    )
    Agent.objects.create(agent_id=PRIVATE, display_name="Not callable", kind=Agent.Kind.INTERNAL)
    partner.callable_agents.set([echo])
    _, raw = PartnerKey.issue(partner, "bench")
    return raw


def queued_requests():
    from a2a.models import A2AMessage

    return A2AMessage.objects.filter(state=A2AMessage.State.QUEUED).count()


def delete_throttle_history():
    from a2a.api import PartnerRateThrottle
    from mcplet_host import ratelimit

    ratelimit.forget(PartnerRateThrottle.name(PARTNER), 60)


# --- the server and the worker ----------------------------------------------------------------


@contextlib.contextmanager
def celery_worker(queue, env, log_path, timeout=90):
    from mcplet_host.celery import app

    name = f"{queue}@{socket.gethostname()}"
    command = [sys.executable, "-m", "celery", "-A", "mcplet_host", "worker", "-P", "threads"]
    command += ["-c", "4", "-n", name, "-Q", queue, "--without-mingle", "--without-gossip"]
    command += ["-l", "WARNING"]
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=common.ROOT, env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + timeout
        while not app.control.ping(destination=[name], timeout=1):
            if process.poll() is not None:
                raise RuntimeError(f"the worker exited ({process.returncode}) before it was up")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not answer a ping after {timeout} s")
        yield process
    except BaseException:
        web.log_tail(log_path, "worker")
        raise
    finally:
        stop(process, 20)


# --- the requests -----------------------------------------------------------------------------


def task_body(recipient):
    """A valid §18.4 task request with fresh ids, built without validation (client CPU)."""
    return json.dumps(
        {
            "messageId": str(uuid.uuid4()),
            "contextId": str(uuid.uuid4()),
            "senderId": PARTNER,
            "recipientId": recipient,
            "timestamp": "2026-03-27T08:00:00.000Z",
            "type": "task_request",
            "payload": {"parameters": {"store": "shinjuku"}},
        }
    ).encode()


def jsonrpc_body():
    """An A2A 1.0 JSON-RPC SendMessage whose DataPart is the task's parameters (fresh ids)."""
    message = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"data": {"store": "shinjuku"}}],
    }
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    return json.dumps(rpc).encode()


def kinds(raw_key):
    """kind → (expected status, method, path, headers, body factory or None)."""
    auth = {"Authorization": f"Bearer {raw_key}"}
    post = {**auth, "Content-Type": "application/json"}
    unknown = {"Authorization": f"Bearer {UNKNOWN_KEY}", "Content-Type": "application/json"}
    return {
        "trivial": (200, "GET", f"/a2a/agents/{ECHO}", auth, None),
        "refused": (401, "POST", "/a2a/tasks", unknown, lambda: task_body(ECHO)),
        "forbidden": (403, "POST", "/a2a/tasks", post, lambda: task_body(PRIVATE)),
        "accepted": (202, "POST", "/a2a/tasks", post, lambda: task_body(ECHO)),
        "answered": (200, "POST", "/a2a/tasks", post, lambda: task_body(ECHO)),
        # The same task through the standard A2A JSON-RPC binding (always HTTP 200).
        "accepted JSON-RPC": (200, "POST", f"/a2a/v1/{ECHO}", post, jsonrpc_body),
        "answered JSON-RPC": (200, "POST", f"/a2a/v1/{ECHO}", post, jsonrpc_body),
    }


async def _load(url, spec, clients, warmup, seconds):
    import httpx

    expected, method, path, headers, body = spec
    latencies, statuses = [], Counter()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
        start = time.perf_counter()
        timed_from, end = start + warmup, start + warmup + seconds

        async def one_client():
            while (now := time.perf_counter()) < end:
                content = body() if body else None
                response = await client.request(method, path, headers=headers, content=content)
                done = time.perf_counter()
                if now >= timed_from:
                    statuses[response.status_code] += 1
                    if response.status_code == expected:
                        latencies.append(done - now)

        await asyncio.gather(*(one_client() for _ in range(clients)))
        return latencies, statuses, time.perf_counter() - timed_from


def load(url, name, spec, args, server_pid):
    print(f"  {name}: {args.warmup:g} s warm-up, {args.seconds:g} s timed ...", flush=True)
    cpu_client, cpu_server = time.process_time(), web.tree_cpu_seconds(server_pid)
    machine = web.machine_busy()
    latencies, statuses, elapsed = asyncio.run(
        _load(url, spec, args.clients, args.warmup, args.seconds)
    )
    total = args.warmup + args.seconds
    cpu_client = (time.process_time() - cpu_client) * args.seconds / total
    cpu_server = (web.tree_cpu_seconds(server_pid) - cpu_server) * args.seconds / total
    busy, all_cpus = (b - a for a, b in zip(machine, web.machine_busy(), strict=True))
    n = len(latencies)
    return {
        "expected": spec[0],
        "n": n,
        "rps": n / elapsed,
        **common.stats([x * 1000 for x in latencies]),
        "other": {code: c for code, c in statuses.items() if code != spec[0]},
        # CPU over the whole phase (warm-up included), scaled to the timed part: approximate
        "server_cpu_ms": cpu_server / n * 1000 if n else float("nan"),
        "client_cpu_ms": cpu_client / n * 1000 if n else float("nan"),
        # every process on the machine (PostgreSQL, Redis, this client, anything else running)
        "machine_busy": busy / all_cpus if all_cpus else float("nan"),
    }


def profile_servers(specs, names, args, env, workdir):
    """A server of the first process count per kind, every thread of every process profiled
    (bench.web_asgi writes one stats file per process as it exits), merged."""
    processes = args.web_processes[0]
    for name in names:
        path = workdir / f"{name}.pstats"
        log = workdir / f"profile-{name}.log"
        with web.server({**env, web.PROFILE_ENV: str(path)}, log, processes) as (url, process):
            result = load(url, name, specs[name], args, process.pid)
        if not (files := web.profiles(path)):
            print(f"\n(no profile of the {name} server: it did not exit cleanly)")
            continue
        stats = pstats.Stats(*map(str, files))
        stats.dump_stats(path)
        title = (
            f"cProfile of the server ({web.describe(processes)}), {name}: {result['rps']:.1f} "
            "req/s under the profiler, all threads (warm-up and start-up included), CPU time"
        )
        common.print_profile(str(path), title, args.top, ("tottime", "cumulative"))


# --- report -----------------------------------------------------------------------------------


def load_average():
    """The 1-minute load average: other work on the machine skews the figures."""
    with contextlib.suppress(OSError):
        return Path("/proc/loadavg").read_text().split()[0]
    return "?"


def print_results(results, clients):
    print(f"\nResults ({clients} concurrent clients; load average now {load_average()})")
    head = (
        f"  {'kind':<16} {'status':>6} {'req/s':>8} {'median ms':>9} {'p95 ms':>8} "
        f"{'mean ms':>8} {'server CPU ms':>13} {'client CPU ms':>13}  other statuses"
    )
    print(head)
    print("  " + "-" * (len(head) - 2))
    for name, r in results.items():
        other = ", ".join(f"{code}×{c}" for code, c in sorted(r["other"].items())) or "-"
        print(
            f"  {name:<16} {r['expected']:>6} {r['rps']:>8.1f} {r['median']:>9.2f} "
            f"{r['p95']:>8.2f} {r['mean']:>8.2f} {r['server_cpu_ms']:>13.2f} "
            f"{r['client_cpu_ms']:>13.2f}  {other}"
        )
    base = results["trivial"]
    print("\n  ratios to the trivial endpoint (req/s; median latency):")
    for name, r in results.items():
        if name != "trivial":
            print(
                f"    {name + '/trivial':<26} {r['rps'] / base['rps']:>6.2f} ; "
                f"{r['median'] / base['median']:>6.2f}"
            )


def print_server_errors(workdir):
    """The distinct exceptions in the servers' logs (their last lines)."""
    print("\n  the server answered 5xx; its exceptions (distinct last lines, counts):")
    for log in sorted(workdir.glob("server*.log")):
        lines = log.read_text(errors="replace").splitlines()
        ends = Counter(
            line
            for i, line in enumerate(lines)
            if line
            and not line.startswith((" ", "Traceback", "During", "The above"))
            and i > 0
            and lines[i - 1].startswith("    ")
        )
        for line, count in ends.most_common(10):
            print(f"    {log.name}: {count}× {line[:160]}")


# --- main -------------------------------------------------------------------------------------


def main(argv=None):
    args = parse_args(argv)
    if not os.environ.get("REDIS_URL"):
        common.refuse("REDIS_URL is not set (e.g. REDIS_URL=redis://127.0.0.1:6379/0).")
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        common.refuse(
            "DATABASE_URL must name a throwaway PostgreSQL database (it is cleared), e.g. "
            "DATABASE_URL=postgres://postgres@127.0.0.1:5432/mcplet_bench."
        )
    queue = f"bench-a2a-{os.getpid()}"
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "mcplet_host.settings",
            "MCPLET_PARTNER_RATE": args.rate,
            "MCPLET_A2A_WAIT": "0",
            web.QUEUE_ENV: queue,
            web.CONN_ENV: args.conn_max_age,
            web.BROADCAST_ENV: "off" if args.without_broadcast else "on",
        }
    )
    if args.db_pool is not None:
        os.environ["DB_POOL_MAX_SIZE"] = args.db_pool
    os.environ["DATABASE_URL"] = own_database(os.environ["DATABASE_URL"])
    with common.scratch("mcplet-bench-a2a-", keep=args.keep) as workdir:
        raw_key = setup_database()
        from mcplet_host.celery import app

        app.conf.task_default_queue = queue  # the in-process requests publish there too
        try:
            run(args, raw_key, queue, workdir)
        finally:
            with contextlib.suppress(Exception):
                common.delete_queues(queue)
            with contextlib.suppress(Exception):
                delete_throttle_history()


def run(args, raw_key, queue, workdir):
    """Load a server of each process count with each kind of request, then list each kind's
    SQL; print it all."""
    delete_throttle_history()
    print(f"database: {common.describe_database()}")
    print(
        f"server: {web.ASGI_APP} by process count {args.web_processes}; broker and cache: Redis, "
        f"private queue {queue!r}; MCPLET_PARTNER_RATE={args.rate}; "
        f"CONN_MAX_AGE={args.conn_max_age}; DB_POOL_MAX_SIZE="
        f"{os.environ.get('DB_POOL_MAX_SIZE', 'as serve sets')}; dashboard audit broadcast "
        f"{'off' if args.without_broadcast else 'on'}; {os.cpu_count()} CPUs; load average "
        f"{load_average()}"
    )
    specs, by_processes = kinds(raw_key), {}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for label, processes in web.labelled(args.web_processes):
        results = by_processes[label] = {}
        log = workdir / f"server-{label}.log"
        with web.server(env, log, processes) as (url, process):
            print(f"{web.describe(processes)} up at {url} (MCPLET_A2A_WAIT=0, no worker)")
            for name in ("trivial", "refused", "forbidden", "accepted", "accepted JSON-RPC"):
                results[name] = load(url, name, specs[name], args, process.pid)
            results["trivial (again)"] = load(url, "trivial", specs["trivial"], args, process.pid)
        if args.worker:
            worker_env = {**env, "MCPLET_A2A_WAIT": "5"}
            with (
                celery_worker(queue, worker_env, workdir / f"worker-{label}.log"),
                web.server(worker_env, workdir / f"server-{label}-answered.log", processes) as (
                    url,
                    process,
                ),
            ):
                print(f"{web.describe(processes)} up at {url} (MCPLET_A2A_WAIT=5, a worker)")
                for name in ("answered", "answered JSON-RPC"):
                    results[name] = load(url, name, specs[name], args, process.pid)
        print(f"\n{web.describe(processes)}:", end="")
        print_results(results, args.clients)
    web.print_scaling(by_processes)
    queued = queued_requests()
    if any(code >= 500 for rs in by_processes.values() for r in rs.values() for code in r["other"]):
        print_server_errors(workdir)
    print(f"\n  (task requests left queued, never delivered: {queued})")
    names = ["trivial", "refused", "forbidden", "accepted", "accepted JSON-RPC"]
    logging.disable(logging.WARNING)  # django.request's lines for the expected 4xx
    in_process.print_queries(in_process.queries(kinds(raw_key), names))
    if args.profile:
        in_process.profile(kinds(raw_key), names, args.requests, args.top)
    if args.server_profile:
        logging.disable(logging.NOTSET)
        profile_servers(specs, names, args, {**os.environ, "PYTHONUNBUFFERED": "1"}, workdir)


if __name__ == "__main__":
    main()
