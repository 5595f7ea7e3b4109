"""Discovery benchmark: 100, 1,000 and 5,000 MCPlet tools spread over 10 servers.

    SECRET_KEY=bench .venv/bin/python bench/discovery.py [--sizes 100,1000,5000] [--servers 10]
        [--page-size 100] [--repeat 3] [--profile [--profile-size N] [--top 25]]

For each size N it writes 10 spec files of N/10 valid MCPlet tools each, starts 10 programmable
MCP servers over streamable HTTP, registers them and times `pools.discovery.discover()` of all
of them, one after the other, twice:

* first discovery: a cold registry, every tool is inserted (and audited);
* rediscovery: nothing changed, the steady state of the watcher and the beat.

It prints the time, tools per second and per-tool cost of each, the share of that time spent in
the database half (`apply_snapshot`), and the ratio of the largest to the smallest per-tool cost
(growth close to linear gives a ratio near 1), then the marginal cost per extra tool between
sizes, which separates the per-tool part from the fixed cost of opening ten MCP sessions. Each
figure is the median of `--repeat` measurements, each on an empty registry after a warm-up
discovery of a tiny separate server. Nothing is asserted: it is a benchmark.

The database is a throwaway SQLite file in a temp dir (a fresh copy per measurement) unless
DATABASE_URL is set; on PostgreSQL the database is created if missing and the pools and audit
tables are flushed between measurements. `--profile` then discovers once more under cProfile
(client side only: the servers are child processes) and prints the hot spots of both phases.
"""

import argparse
import contextlib
import cProfile
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.common

from bench import common

POOLS = ["media-pool", "crm-pool", "billing-pool"]
DEFAULT_SIZES = (100, 1000, 5000)
STRICT_PASSKEY = {"required": "passkey", "enforcement": "strict"}
# What a measurement starts from empty on PostgreSQL: the registry and the audit trail.
TABLES = (
    "pools.Mcplet",
    "pools.McpServer",
    "pools.Pool",
    "mcplet_host.AuditEvent",
    "mcplet_host.AuditChainHead",
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default=",".join(map(str, DEFAULT_SIZES)),
        help="total tool counts, comma separated (default: %(default)s)",
    )
    parser.add_argument("--servers", type=int, default=10, help="servers the tools are spread on")
    parser.add_argument("--page-size", type=int, default=100, help="tools/list page size")
    parser.add_argument(
        "--repeat", type=int, default=3, help="measurements per size, the median is shown"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after the timed runs, discover once more under cProfile and print the hot spots",
    )
    parser.add_argument(
        "--profile-size", type=int, help="which of --sizes to profile (default: largest)"
    )
    parser.add_argument("--top", type=int, default=25, help="rows of profile output")
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    return args


# --- database ---------------------------------------------------------------------------------


class Database:
    """The benchmark's (migrated) database: a fresh SQLite copy, or a flushed PostgreSQL, per
    measurement."""

    def __init__(self, workdir):
        from django.db import connection

        self.vendor = connection.vendor
        self.template = None
        if self.vendor == "sqlite":
            # Migrating once and copying the file is quicker than migrating per measurement.
            connection.close()
            self.template = workdir / "template.sqlite3"
            shutil.copyfile(connection.settings_dict["NAME"], self.template)
            self.workdir = workdir

    def describe(self):
        if self.template is None:
            return common.describe_database()
        return common.describe_database(
            f"throwaway files in {self.workdir}, a fresh copy per measurement"
        )

    def reset(self, label):
        from django.conf import settings
        from django.db import connections

        if self.template is None:
            common.flush_tables(TABLES)
            return
        connections.close_all()
        fresh = self.workdir / f"bench-{label}.sqlite3"
        shutil.copyfile(self.template, fresh)
        settings.DATABASES["default"]["NAME"] = str(fresh)
        connections["default"].settings_dict["NAME"] = str(fresh)


# --- specs and servers ------------------------------------------------------------------------


def make_tools(server_index, count):
    """`count` valid MCPlet tools: reads, prepares and passkey-guarded app-only actions."""
    tools = []
    for i in range(count):
        name = f"s{server_index}_tool_{i}"
        kind = ("read", "read", "prepare", "action")[i % 4]
        if kind == "action":
            meta = {"mcpletType": "action", "visibility": ["app"], "auth": dict(STRICT_PASSKEY)}
        elif kind == "prepare":
            meta = {"mcpletType": "prepare", "visibility": ["model", "app"]}
        else:
            meta = {"mcpletType": "read", "visibility": ["model"]}
        if i % 3 == 0:
            meta["pool"] = POOLS[i % len(POOLS)]
        tools.append(
            {
                "name": name,
                "title": f"Tool {i} of server {server_index}",
                "description": f"{kind} tool number {i} served by server {server_index}",
                "inputSchema": {
                    "type": "object",
                    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                    "required": ["query"],
                },
                "_meta": meta,
            }
        )
    return tools


def start_servers(stack, specdir, specs, page_size):
    """Write and serve one spec per entry of `specs` (name → tools), starting the servers in
    parallel; returns [(name, url)]. Each server is stopped when `stack` closes."""
    from mcplets.examples.programmable import serve_http, write_spec

    contexts = {
        name: serve_http(write_spec(specdir / f"{name}.json", tools), page_size=page_size)
        for name, tools in specs.items()
    }
    with ThreadPoolExecutor(max_workers=len(contexts) or 1) as pool:
        futures = {name: pool.submit(context.__enter__) for name, context in contexts.items()}
    served, failure = [], None
    for name, future in futures.items():
        try:
            served.append((name, future.result()))
            stack.push(contexts[name])
        except Exception as exc:
            failure = failure or exc
    if failure:
        raise failure
    return served


# --- timing -----------------------------------------------------------------------------------


def discover_all(servers, profiler=None):
    """Discover every server in turn; returns (seconds, seconds in apply_snapshot, reports)."""
    from pools import discovery

    # `apply_snapshot` timed too: the database half of each discovery.
    timed, reports = common.Stopwatch(), []
    with mock.patch.object(discovery, "apply_snapshot", timed.wrap(discovery.apply_snapshot)):
        if profiler:
            profiler.enable()
        start = time.perf_counter()
        for server in servers:
            reports.append(discovery.discover(server))
        elapsed = time.perf_counter() - start
        if profiler:
            profiler.disable()
    return elapsed, timed.seconds, reports


def check(reports, expected, phase):
    """Warn (on stderr) when the discovery did not store what the specs hold."""
    accepted = sum(r.accepted for r in reports)
    rejected = sum(r.rejected for r in reports)
    changed = sum(len(r.changed) for r in reports)
    problems = []
    if accepted != expected or rejected:
        problems.append(f"{accepted} accepted, {rejected} rejected (expected {expected} accepted)")
    if phase == "rediscovery" and changed:
        problems.append(f"{changed} tools reported as changed on an unchanged rediscovery")
    for problem in problems:
        print(f"  WARNING ({phase}): {problem}", file=sys.stderr)


def measure_once(db, label, served, warmup, size, profilers=(None, None)):
    """A fresh registry, a warm-up discovery, then the first discovery and a rediscovery."""
    from pools.discovery import discover
    from pools.models import McpServer, Pool

    db.reset(label)
    for name in POOLS:
        Pool.objects.create(name=name, description=f"{name} for the benchmark")
    # Warm-up: imports, the database connection, Django's caches, the first event loop.
    for name, url in warmup:
        discover(McpServer.objects.create(name=name, transport="http", url=url))
    servers = [
        McpServer.objects.create(name=name, transport="http", url=url) for name, url in served
    ]
    first, first_db, reports = discover_all(servers, profilers[0])
    check(reports, size, "first discovery")
    for server in servers:
        server.refresh_from_db()
    again, again_db, reports = discover_all(servers, profilers[1])
    check(reports, size, "rediscovery")
    return {"first": first, "first_db": first_db, "again": again, "again_db": again_db}


def run_size(db, size, args, specdir, profile=False):
    """Median figures of `args.repeat` measurements of `size` tools; with `profile`, one more
    measurement under cProfile, whose two profilers are returned too."""
    quotient, remainder = divmod(size, args.servers)
    specs = {f"n{size}-{i}": make_tools(i, quotient + (i < remainder)) for i in range(args.servers)}
    warmup_tools = [dict(t, name=f"warmup_{t['name']}") for t in make_tools(0, 3)]
    with contextlib.ExitStack() as stack:
        warmup = start_servers(stack, specdir, {f"warmup-{size}": warmup_tools}, args.page_size)
        served = start_servers(stack, specdir, specs, args.page_size)
        runs = [
            measure_once(db, f"{size}-{rep}", served, warmup, size) for rep in range(args.repeat)
        ]
        profilers = None
        if profile:
            profilers = (cProfile.Profile(), cProfile.Profile())
            measure_once(db, f"{size}-profile", served, warmup, size, profilers)
    row = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    return {"size": size, **row}, profilers


def print_results(rows):
    head = (
        f"{'tools':>6} | {'first s':>8} {'tools/s':>9} {'µs/tool':>8} {'db %':>5} | "
        f"{'again s':>8} {'tools/s':>9} {'µs/tool':>8} {'db %':>5}"
    )
    print()
    print(head)
    print("-" * len(head))
    for r in rows:
        n = r["size"]
        print(
            f"{n:>6} | {r['first']:>8.3f} {n / r['first']:>9.0f} {r['first'] / n * 1e6:>8.1f} "
            f"{r['first_db'] / r['first'] * 100:>4.0f}% | "
            f"{r['again']:>8.3f} {n / r['again']:>9.0f} {r['again'] / n * 1e6:>8.1f} "
            f"{r['again_db'] / r['again'] * 100:>4.0f}%"
        )
    print("first = cold registry (all inserts); again = unchanged rediscovery (steady state);")
    print("db % = share of the time spent in apply_snapshot (validation + database writes)")
    if len(rows) < 2:
        return
    rows = sorted(rows, key=lambda r: r["size"])
    small, large = rows[0], rows[-1]
    print(f"\nper-tool cost ratio, {large['size']} / {small['size']} tools (1.0 = linear):")
    for key, label in (("first", "first discovery"), ("again", "rediscovery")):
        ratio = (large[key] / large["size"]) / (small[key] / small["size"])
        db_ratio = (large[f"{key}_db"] / large["size"]) / (small[f"{key}_db"] / small["size"])
        print(f"  {label:<16} {ratio:6.2f}   (apply_snapshot alone: {db_ratio:.2f})")
    # A ratio well under 1 means a fixed per-server cost dominates the small sizes; the
    # marginal cost between consecutive sizes shows whether the per-tool part itself grows.
    print("\nmarginal cost per extra tool between consecutive sizes (flat = linear):")
    for key, label in (("first", "first discovery"), ("again", "rediscovery")):
        steps = [
            f"{a['size']}→{b['size']}: {(b[key] - a[key]) / (b['size'] - a['size']) * 1e6:.0f} µs"
            for a, b in zip(rows, rows[1:], strict=False)
        ]
        fixed = (
            small[key] - (large[key] - small[key]) / (large["size"] - small["size"]) * small["size"]
        )
        print(f"  {label:<16} {', '.join(steps)}; fixed cost per round ≈ {fixed * 1000:.0f} ms")


def main(argv=None):
    args = parse_args(argv)
    with common.scratch("mcplet-bench-") as workdir:
        common.setup_django(workdir)
        db = Database(workdir)
        specdir = workdir / "specs"
        specdir.mkdir()
        print(f"database: {db.describe()}")
        print(f"{args.servers} servers over streamable HTTP, tools/list page size {args.page_size}")
        profile_size = args.profile_size or max(args.sizes)
        rows, profilers = [], None
        for size in args.sizes:
            print(f"discovering {size} tools ({args.repeat}x) ...", flush=True)
            row, profiled = run_size(db, size, args, specdir, args.profile and size == profile_size)
            rows.append(row)
            profilers = profilers or profiled
        print_results(rows)
        if profilers:
            for profiler, phase in zip(profilers, ("first discovery", "rediscovery"), strict=True):
                common.print_profile(profiler, f"cProfile, {profile_size} tools, {phase}", args.top)


if __name__ == "__main__":
    main()
