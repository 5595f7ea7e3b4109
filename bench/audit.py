"""Audit-chain appends per second with 1, 2 and 4 writer processes.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/mcplet_bench SECRET_KEY=bench \
        .venv/bin/python bench/audit.py [--writers 1,2,4] [--seconds 5]

Every writer is its own process with its own connection, appending one event at a time with
`audit.record` outside any transaction, as the gateway does after each tool call. All writers of
a round start together and append for `--seconds`; the round prints the appends per second of
all of them, per writer, the median and p95 of one append, and the ratio to one writer (1.0:
the chain serialises everything; N: it scales with the writers). The chain is then checked
(`verify_chain`) over every event the rounds wrote. The database is a throwaway SQLite file
unless DATABASE_URL is set; the audit tables are emptied at the start. Nothing is asserted.
"""

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.common

from bench import common

TABLES = ("mcplet_host.AuditEvent", "mcplet_host.AuditChainHead")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", default="1,2,4", help="writer processes per round")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each round")
    return parser.parse_args(argv)


def writer(start_at, seconds, results):
    """One writer process: append until the round ends, report the append durations."""
    from django.db import connections

    from mcplet_host import audit

    connections.close_all()  # the parent's connection is not ours to share
    while time.time() < start_at:
        time.sleep(0.001)
    durations, end = [], start_at + seconds
    while (now := time.perf_counter()) and time.time() < end:
        audit.record(
            audit.EventType.TOOL_EXECUTED,
            actor_type=audit.ActorType.AGENT,
            actor_id="bench-agent",
            target_server="bench",
            target_tool="query_crm",
            trace_id="bench",
            details={"surface": "model", "mcpletType": "read", "pool": "info-pool"},
        )
        durations.append(time.perf_counter() - now)
    results.put(durations)


def round_of(writers, seconds):
    from django.db import connections

    connections.close_all()
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    start_at = time.time() + 1.0
    processes = [
        context.Process(target=writer, args=(start_at, seconds, results)) for _ in range(writers)
    ]
    for process in processes:
        process.start()
    durations = [results.get() for _ in processes]
    for process in processes:
        process.join()
    return durations


def main(argv=None):
    args = parse_args(argv)
    counts = [int(n) for n in args.writers.split(",")]
    with common.scratch("bench-audit-") as workdir:
        common.setup_django(workdir, flush=TABLES)
        print(f"database: {common.describe_database()}; {args.seconds:g} s per round")
        base = None
        for writers in counts:
            durations = round_of(writers, args.seconds)
            total = sum(len(d) for d in durations)
            rate = total / args.seconds
            base = base or rate / writers  # one writer's rate, from the first round
            figures = common.stats([s for d in durations for s in d])
            print(
                f"  {writers} writer(s): {rate:8.0f} appends/s ({rate / writers:7.0f} each), "
                f"one append median {figures['median'] * 1000:6.2f} ms, "
                f"p95 {figures['p95'] * 1000:6.2f} ms, ×{rate / base:.2f} of one writer"
            )
        from mcplet_host.audit import verify_chain

        started = time.perf_counter()
        checked, broken = verify_chain()
        print(
            f"verify_chain: {checked} events in {time.perf_counter() - started:.2f} s, "
            f"{broken or 'intact'}"
        )


if __name__ == "__main__":
    main()
