"""Gateway benchmark: the per-call overhead, and the LLM tool-list query at scale.

    SECRET_KEY=bench .venv/bin/python bench/gateway.py [--calls 1000] [--runs 200]
        [--others 10000] [--profile [--top 25]]

Part 1 calls the same read MCPlet over streamable HTTP `--calls` times directly with the `mcp`
SDK's `Client` at the revision the gateway speaks too (a client and an event loop per block) and
`--calls` times through `gateway.call_tool` (resolve, surface, grants, arguments, rate limit,
the session pool, the envelope, the audit event), in five blocks each taken in turn (a load that
comes and goes weighs on both), and prints the median, p95, mean and calls/s of both, the ratio
of the medians gateway/direct, then the median of the whole gateway call and of each of its
steps, timed in interleaved rounds. With `--profile`, or when the ratio is over 3, one batch of
gateway calls is run under cProfile (the main thread only: the MCP round trip itself runs on the
session pool's loop thread and shows up as waiting in `future.result`).

Part 2 times `list(gateway.tools_for(agent))` (median of `--runs`) for an agent granted one pool
of 20 MCPlets (plus 10 pool-less ones), first with 10 MCPlets in pools it does not hold, then
with `--others`; it prints both medians, their ratio (near 1 when the other pools are never
read), the query count, the SQL and the plan (after ANALYZE).

The database is a throwaway SQLite file unless DATABASE_URL is set (a PostgreSQL database is
created if missing); the tables used are flushed at the start. Nothing is asserted.
"""

import argparse
import asyncio
import cProfile
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.common

from bench import common

FILTER = {"type": "object", "properties": {"filter": {"type": "string"}}, "required": ["filter"]}
TOOL = {
    "name": "query_crm",
    "description": "Look customers up (benchmark)",
    "inputSchema": FILTER,
    "_meta": {"mcpletType": "read", "visibility": ["model"], "pool": "info-pool"},
}
ARGS = {"filter": "rain"}
WARMUP = 20
BLOCKS = 5  # part 1 times the direct and the gateway calls in turn, by blocks


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="timed calls per path")
    parser.add_argument("--runs", type=int, default=200, help="timed tool-list queries per size")
    parser.add_argument("--others", type=int, default=10_000, help="MCPlets in other pools")
    parser.add_argument("--profile", action="store_true", help="profile gateway calls anyway")
    parser.add_argument("--top", type=int, default=25, help="rows of profile output")
    return parser.parse_args(argv)


# --- database ---------------------------------------------------------------------------------


# The registry, the agents (their grants cascade), held calls and the audit trail.
TABLES = (
    "held.Ceremony",
    "pools.Mcplet",
    "pools.McpServer",
    "agents.Agent",
    "pools.Pool",
    "mcplet_host.AuditEvent",
    "mcplet_host.AuditChainHead",
)


def setup_database(workdir):
    from django.conf import settings

    common.setup_django(workdir, flush=TABLES)
    cache = settings.CACHES["default"]["BACKEND"].rsplit(".", 1)[-1]
    print(f"database: {common.describe_database()}; cache: {cache}")


# --- figures ----------------------------------------------------------------------------------


def ms_stats(seconds):
    figures = {key: value * 1000 for key, value in common.stats(seconds).items()}
    return {**figures, "rate": len(seconds) / sum(seconds)}


def show(label, f):
    print(
        f"  {label:<8} median {f['median']:7.3f} ms   p95 {f['p95']:7.3f} ms   "
        f"mean {f['mean']:7.3f} ms   {f['rate']:7.0f} calls/s"
    )


def timed(func, count):
    seconds = []
    for _ in range(count):
        start = time.perf_counter()
        func()
        seconds.append(time.perf_counter() - start)
    return seconds


# --- part 1: per-call overhead ----------------------------------------------------------------


async def timed_calls(session, count, name="query_crm"):
    """`count` calls of the tool `name` on an open `mcp` Client or ClientSession: their
    durations."""
    seconds = []
    for _ in range(count):
        start = time.perf_counter()
        await session.call_tool(name, ARGS)
        seconds.append(time.perf_counter() - start)
    return seconds


async def direct_calls(url, count):
    """The SDK's own client (`mcp.Client`, as its examples use it), at the newest revision the
    server and it share, as the gateway's session pool speaks to the server."""
    from mcp import Client

    async with Client(url) as client:
        await timed_calls(client, WARMUP)
        started = time.process_time()
        seconds = await timed_calls(client, count)
        return seconds, time.process_time() - started


def gateway_steps(call, agent, count):
    """The gateway call and each of its steps, timed in interleaved rounds (so that a change of
    machine load hits them all alike): {label: median ms}."""
    from mcplet_host import audit, registry
    from mcplet_host.authority import HOST
    from mcplet_host.gateway import checks, envelopes
    from pools.mcp_client import ServerConfig
    from pools.sessions import sessions

    mcplet = checks.check("query_crm", ARGS, agent, HOST, "model")
    config = ServerConfig.of(mcplet.server)
    result = sessions.call_tool(config, "query_crm", ARGS, timeout=30)
    snapshot = registry.current()  # the look-ups in it alone (the token's read is its own step)

    def record():
        audit.record(
            audit.EventType.TOOL_EXECUTED,
            actor_type=audit.ActorType.AGENT,
            actor_id=agent.agent_id,
            target_server=mcplet.server.name,
            target_tool=mcplet.name,
            result=audit.SUCCESS,
            trace_id="bench",
            details={"surface": "model", "mcpletType": "read", "pool": "info-pool"},
        )

    checked, pool, envelope, record_ = (
        "checks (gateway.checks.check), whole",
        "session pool tools/call (thread hop + MCP round trip)",
        "envelope (envelopes.envelope_of)",
        "audit.record (one chained event, own transaction)",
    )
    steps = {
        "gateway.call_tool, whole": call,
        checked: lambda: checks.check("query_crm", ARGS, agent, HOST, "model"),
        "  registry.current (reads the version token)": registry.current,
        "  _resolve (kept)": lambda: checks._resolve("query_crm", snapshot),
        "  _check_grants (kept)": lambda: checks._check_grants(mcplet, agent, HOST, snapshot),
        "  _check_arguments (JSON Schema)": lambda: checks._check_arguments(mcplet, ARGS),
        "  rate limit (Pool.take_call)": mcplet.pool.take_call,
        pool: lambda: sessions.call_tool(config, "query_crm", ARGS, timeout=30),
        envelope: lambda: envelopes.envelope_of(mcplet, result),
        record_: record,
    }
    seconds = {label: [] for label in steps}
    for _ in range(count):
        for label, func in steps.items():
            seconds[label] += timed(func, 1)
    medians = {label: statistics.median(values) * 1000 for label, values in seconds.items()}
    medians["sum of checks, session pool, envelope, audit"] = sum(
        medians[label] for label in (checked, pool, envelope, record_)
    )
    return medians


def register_server(url):
    """The MCP server at `url` in the registry (discovered), its read MCPlet's pool granted to an
    agent (a rate limit that never bites): that agent."""
    from agents.models import Agent
    from pools.discovery import discover
    from pools.models import McpServer, Pool

    pool = Pool.objects.create(name="info-pool", rate_limit_per_minute=1_000_000)
    server = McpServer.objects.create(name="bench-http", transport="http", url=url)
    report = discover(server)
    print(f"  discovered {url}: {report.accepted} accepted, {report.rejected} rejected")
    agent = Agent.objects.create(agent_id="bench-agent", display_name="Bench")
    agent.accessible_pools.set([pool])
    return agent


def in_turn(url, call, calls):
    """The direct and the gateway calls in BLOCKS blocks each, taken in turn (a load that comes
    and goes weighs on both): their ms_stats, and the CPU per call of each path in ms — this
    process, all its threads (the session pool's loop, the sends after a commit); not the MCP
    server, PostgreSQL or Redis."""
    direct, via, block = [], [], max(1, calls // BLOCKS)
    cpu = {"direct": 0.0, "gateway": 0.0}
    for _ in range(BLOCKS):
        seconds, cpu_seconds = asyncio.run(direct_calls(url, block))
        direct, cpu["direct"] = direct + seconds, cpu["direct"] + cpu_seconds
        cpu["gateway"] += cpu_time(lambda: via.extend(timed(call, block)))
    per_call = {path: seconds / (BLOCKS * block) * 1000 for path, seconds in cpu.items()}
    return ms_stats(direct), ms_stats(via), per_call


def cpu_time(func):
    started = time.process_time()
    func()
    time.sleep(0.05)  # the sends after the last commit, counted with it
    return time.process_time() - started


def print_sends(call, calls):
    """What the sends after each audit commit (the dashboard's live message, the A2A stream
    announcement: mcplet_host.background) cost a call: gateway calls with them and with
    `gather` made a no-op, in BLOCKS alternations."""
    from mcplet_host import background

    sends, block = background.sends, max(1, calls // BLOCKS)
    seconds, cpu = {"on": [], "off": []}, {"on": 0.0, "off": 0.0}
    for _ in range(BLOCKS):
        for mode in seconds:
            if mode == "off":
                sends.gather = lambda *args, **kwargs: None  # the instance's, over the class's
            cpu[mode] += cpu_time(lambda mode=mode: seconds[mode].extend(timed(call, block)))
            vars(sends).pop("gather", None)
    on, off = (statistics.median(seconds[m]) * 1000 for m in ("on", "off"))
    cpu_on, cpu_off = (cpu[m] / (BLOCKS * block) * 1000 for m in ("on", "off"))
    print(
        f"  the sends after the audit commit: median {on:.3f} ms with, {off:.3f} without "
        f"(+{on - off:.3f} ms); CPU per call {cpu_on:.3f} against {cpu_off:.3f} ms "
        f"(+{cpu_on - cpu_off:.3f} ms)"
    )


def part1(workdir, args):
    from mcplet_host import gateway
    from mcplets.examples.programmable import serve_http, write_spec
    from pools.sessions import sessions

    print(f"\n== Part 1: one read MCPlet over streamable HTTP, {args.calls} calls per path ==")
    with serve_http(write_spec(workdir / "tools.json", [TOOL])) as url:
        agent = register_server(url)

        def call():
            return gateway.call_tool(agent, "query_crm", ARGS, "model", "bench")

        try:
            outcomes = [call() for _ in range(WARMUP)]
            if any(o.status != "executed" or o.is_error for o in outcomes):
                print(f"  WARNING: the gateway answered {outcomes[-1].envelope}", file=sys.stderr)
            direct, via, cpu = in_turn(url, call, args.calls)
            show("direct", direct)
            show("gateway", via)
            ratio = via["median"] / direct["median"]
            extra = via["median"] - direct["median"]
            print(f"  ratio of medians gateway/direct: {ratio:.2f} (+{extra:.3f} ms per call)")
            print(
                f"  CPU per call, this process: direct {cpu['direct']:.3f} ms, gateway "
                f"{cpu['gateway']:.3f} ms (+{cpu['gateway'] - cpu['direct']:.3f} ms)"
            )
            print_sends(call, args.calls)
            print(f"  gateway steps, {args.calls} interleaved rounds (median):")
            for label, median in gateway_steps(call, agent, args.calls).items():
                print(f"    {median:7.3f} ms  {label}")
            if args.profile or ratio > 3:
                profile(call, min(args.calls, 500), args.top)
        finally:
            sessions.close_all()


def profile(call, count, top):
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(count):
        call()
    profiler.disable()
    common.print_profile(
        profiler, f"cProfile, {count} gateway calls", top, ("tottime", "cumulative")
    )


# --- part 2: the LLM tool list ----------------------------------------------------------------


def add_mcplets(server, prefix, count, pools, start=0):
    from pools.models import Mcplet

    rows = []
    for i in range(start, start + count):
        pool = pools[i % len(pools)]
        rows.append(
            Mcplet(
                server=server,
                name=f"{prefix}_{i}",
                description=f"Benchmark read tool {prefix} {i}",
                input_schema=FILTER,
                meta={"mcpletType": "read", "visibility": ["model"]},
                mcplet_type="read",
                visibility=["model"],
                model_visible=True,  # bulk_create skips save(), which derives it
                pool=pool,
                pool_name=pool.name if pool else "",
                status="accepted",
            )
        )
    Mcplet.objects.bulk_create(rows, batch_size=1000)


def measure_tool_list(agent, runs):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from mcplet_host import gateway

    with connection.cursor() as cursor:  # fresh planner statistics, as autovacuum would keep
        cursor.execute("ANALYZE")
    list(gateway.tools_for(agent))
    with CaptureQueriesContext(connection) as queries:
        tools = list(gateway.tools_for(agent))
    seconds = timed(lambda: list(gateway.tools_for(agent)), runs)
    return statistics.median(seconds) * 1000, len(tools), queries.captured_queries


def part2(args):
    from django.db import connection

    from agents.models import Agent
    from pools.models import Mcplet, McpServer, Pool

    print(f"\n== Part 2: the LLM tool list, median of {args.runs} queries ==")
    server = McpServer.objects.create(name="bench-rows", transport="http", url="http://x/mcp")
    granted = Pool.objects.create(name="granted-pool")
    others = Pool.objects.bulk_create([Pool(name=f"other-pool-{i}") for i in range(10)])
    agent = Agent.objects.create(agent_id="bench-list-agent", display_name="List")
    agent.accessible_pools.set([granted])
    add_mcplets(server, "granted", 20, [granted])
    add_mcplets(server, "poolless", 10, [None])
    medians, added = [], 0
    for target in (10, args.others):
        add_mcplets(server, "other", target - added, others, start=added)
        added = target
        in_others = Mcplet.objects.exclude(pool=None).exclude(pool=granted).count()
        median, listed, queries = measure_tool_list(agent, args.runs)
        medians.append(median)
        print(
            f"  {in_others:>6} MCPlets in other pools: median {median:7.3f} ms, "
            f"{listed} tools listed, {len(queries)} quer{'y' if len(queries) == 1 else 'ies'}"
        )
    print(f"  ratio of the medians, many / few others: {medians[1] / medians[0]:.2f}")
    print("\n  SQL, as run: " + "\n  ".join(q["sql"] for q in queries))
    explain = "EXPLAIN ANALYZE " if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN "
    with connection.cursor() as cursor:  # the captured SQL is complete: values are inlined
        cursor.execute(explain + queries[-1]["sql"])
        plan = "\n".join(" ".join(map(str, row)) for row in cursor.fetchall())
    print("\n  plan:\n    " + plan.replace("\n", "\n    "))


def main(argv=None):
    args = parse_args(argv)
    with common.scratch("mcplet-bench-gateway-") as workdir:
        setup_database(workdir)
        part1(workdir, args)
        part2(args)


if __name__ == "__main__":
    main()
