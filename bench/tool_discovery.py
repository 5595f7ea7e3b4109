"""Tool discovery benchmark (MGP §16): schema tokens per turn, recall and query latency.

    SECRET_KEY=bench .venv/bin/python bench/tool_discovery.py [--sizes 1000,10000]
        [--databases sqlite,postgres] [--repeat 3] [--limit 5]

For each database and size N it registers the generated catalogue of `bench/tool_catalogue.py`
(N MCPlets from a few dozen real MCP tool shapes, English and Japanese, in a dozen pools and
servers) through discovery's own database half (`apply_snapshot`, which also indexes them),
grants every pool to one agent, and then, through `toolindex.search` over `gateway.visible_to`
— exactly what the `mgp.tools.discover` meta-tool runs:

* **schema tokens per turn** (litellm's counter): every tool the agent may call in context
  (L0), against the two meta-tools plus the full schemas of the `--limit` tools one discovery
  returns (L2, counted generously: the found tools are in the tool result of that turn);
* **recall@1 and recall@5** over the labelled queries (a query is right when one of the tools a
  person would expect is among the first k), and recall@5 of each half of them (`half`: the
  search is tuned on the first and checked on the second);
* **query latency** p50/p95 of a whole search (the registry token, the visible ids, the terms'
  postings, BM25, loading the found MCPlets), each query `--repeat` times; `first p95` is the
  first pass alone, when each term's postings are read from the database (they are then kept
  until the registry changes).

PostgreSQL is used at DATABASE_URL (default: postgres://postgres@127.0.0.1:5432/mcplet_bench);
each database runs in a process of its own. Nothing is asserted: it is a benchmark.
"""

import argparse
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.common

from bench import common, tool_catalogue

TABLES = ("pools.Mcplet", "pools.McpServer", "pools.Pool", "agents.Agent", "toolindex.Posting")
POSTGRES = "postgres://postgres@127.0.0.1:5432/mcplet_bench"
STRICT = {"required": "passkey", "enforcement": "strict", "promptMessage": "Approve"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--databases", default="sqlite,postgres")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--limit", type=int, default=5, help="results per discovery")
    parser.add_argument("--database", help=argparse.SUPPRESS)  # the child's own
    return parser.parse_args(argv)


def register(tools):
    """The catalogue through discovery's database half, one server at a time; the agent."""
    from agents.models import Agent
    from pools.discovery import DiscoveredTool, apply_snapshot
    from pools.models import McpServer, Pool

    common.flush_tables(TABLES)
    pools = {name: Pool.objects.create(name=name) for name in sorted({t["pool"] for t in tools})}
    by_server = {}
    for tool in tools:
        by_server.setdefault(tool["server"], []).append(tool)
    started = time.perf_counter()
    for name, listed in sorted(by_server.items()):
        server = McpServer.objects.create(name=name, transport="stdio", command="unused")
        apply_snapshot(server.pk, [_discovered(DiscoveredTool, t) for t in listed])
    seconds = time.perf_counter() - started
    agent = Agent.objects.create(agent_id="assistant", display_name="Assistant")
    agent.accessible_pools.set(pools.values())
    return agent, seconds


def _discovered(kind, tool):
    meta = {"mcpletType": tool["mcplet_type"], "visibility": ["model"], "pool": tool["pool"]}
    if tool["mcplet_type"] == "action":
        meta["auth"] = STRICT  # a model-visible action must be strict (spec §16.1)
    return kind(
        name=tool["name"],
        title=tool.get("title", ""),
        description=tool["description"],
        input_schema=tool["input_schema"],
        meta=meta,
    )


def half(query):
    """0 for the queries the search may be tuned on, 1 for those it is checked on: a stable
    split by the query's text."""
    return zlib.crc32(query.encode()) % 2


def measure(size, args):
    from agents import llm, toolset
    from mcplet_host import gateway
    from toolindex import search
    from toolindex.models import Posting

    tools = tool_catalogue.catalogue(size)
    labelled = tool_catalogue.queries(tools)
    agent, indexing = register(tools)
    visible = gateway.visible_to(agent)
    all_tokens = llm.schema_tokens([toolset.spec(m) for m in visible])

    hits1 = hits5 = 0
    halves = [[0, 0], [0, 0]]  # per half: queries, hits@5
    latencies, first, found_tokens = [], [], []
    for item in labelled:
        for repeat in range(args.repeat):
            started = time.perf_counter()
            found = search.search(visible, item["query"], limit=args.limit)
            latencies.append((time.perf_counter() - started) * 1000)
            if repeat == 0:
                first.append(latencies[-1])
        names = [m.name for m, _ in found.tools]
        expected = set(item["expected"])
        hits1 += bool(names[:1] and names[0] in expected)
        hits5 += bool(expected & set(names[:5]))
        halves[half(item["query"])][0] += 1
        halves[half(item["query"])][1] += bool(expected & set(names[:5]))
        found_tokens.append(llm.schema_tokens([toolset.spec(m) for m, _ in found.tools]))
    discovery_tokens = llm.schema_tokens(toolset.meta_specs()) + sum(found_tokens) / len(labelled)
    timing, cold = common.stats(latencies), common.stats(first)
    return {
        "size": size,
        "queries": len(labelled),
        "postings": Posting.objects.count(),
        "indexing_s": indexing,
        "all_tokens": all_tokens,
        "discovery_tokens": discovery_tokens,
        "recall1": hits1 / len(labelled),
        "recall5": hits5 / len(labelled),
        "halves": [hits / max(queries, 1) for queries, hits in halves],
        "p50": timing["median"],
        "p95": timing["p95"],
        "cold_p95": cold["p95"],
    }


def child(args):
    if args.database == "postgres":
        os.environ["DATABASE_URL"] = os.environ.get("DATABASE_URL") or POSTGRES
    else:
        os.environ.pop("DATABASE_URL", None)
    os.environ.setdefault("SECRET_KEY", "bench")
    with common.scratch("tool-discovery") as workdir:
        common.setup_django(workdir)
        from agents import llm

        llm.load()
        print(f"\n{common.describe_database()}")
        print(
            f"{'tools':>6} {'queries':>7} {'postings':>8} {'index s':>7} {'L0 tokens':>10} "
            f"{'L2 tokens':>9} {'saved':>6} {'R@1':>5} {'R@5':>5} {'tune/check':>10} "
            f"{'p50 ms':>7} {'p95 ms':>7} {'first p95':>9}"
        )
        for size in map(int, args.sizes.split(",")):
            r = measure(size, args)
            saved = 1 - r["discovery_tokens"] / r["all_tokens"]
            halves = "{:.2f}/{:.2f}".format(*r["halves"])
            print(
                f"{r['size']:>6} {r['queries']:>7} {r['postings']:>8} {r['indexing_s']:>7.1f} "
                f"{r['all_tokens']:>10,} {r['discovery_tokens']:>9,.0f} {saved:>6.1%} "
                f"{r['recall1']:>5.2f} {r['recall5']:>5.2f} {halves:>10} "
                f"{r['p50']:>7.2f} {r['p95']:>7.2f} {r['cold_p95']:>9.2f}",
                flush=True,
            )


def main(argv=None):
    args = parse_args(argv)
    if args.database:
        return child(args)
    for database in args.databases.split(","):
        command = [sys.executable, __file__, "--database", database, "--sizes", args.sizes]
        command += ["--repeat", str(args.repeat), "--limit", str(args.limit)]
        subprocess.run(command, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
