"""Server-side binding and prepared statements on PostgreSQL, off and on, in one process: an A2A
delivery's cost.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/mcplet_bench \\
    REDIS_URL=redis://127.0.0.1:6379/0 SECRET_KEY=bench .venv/bin/python bench/binding.py \\
        [--block 100] [--rounds 6]

`agents.deliver` runs in this process (no broker, as `bus.py`'s in-process part: the bench's
echo agent answers at once) on requests sent beforehand, in blocks of `--block` deliveries
taken in turn with the connection's `server_side_binding` off (psycopg quotes the values into
the SQL) and on with `prepare_threshold` 5 (the settings': values sent apart, a statement
prepared at its fifth run on a connection), a new connection at each switch and ten untimed
deliveries first (its statements compiled and prepared). Each block gives
this process's CPU, the PostgreSQL backend's CPU (from /proc, so the server must run on this
machine) and the wall time per delivery; their medians over `--rounds` blocks are printed for
each setting. Taken in turn in one process, the two settings meet the same machine load. It
clears the agents and A2A tables (as `bus.py`). Nothing is asserted.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.common

from bench import bus as bus_bench
from bench import common
from bench.bus_pieces import ECHO, SENDER

WARM = 10


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", type=int, default=100, help="deliveries per block")
    parser.add_argument("--rounds", type=int, default=6, help="blocks per setting")
    return parser.parse_args(argv)


def backend_cpu(connection):
    """CPU seconds the connection's PostgreSQL backend has used."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv=None):
    args = parse_args(argv)
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("DATABASE_URL must name a PostgreSQL database on this machine.")
    bus_bench.setup_database()
    from django.db import connection

    from a2a import bus
    from agents.tasks import deliver

    print(f"database: {common.describe_database()}")
    with mock.patch.object(bus, "enqueue"):  # delivered here, not by a worker
        count = (args.block + WARM) * args.rounds * 2
        todo = iter([bus.send_task(SENDER, ECHO, {"i": i}) for i in range(count)])

    def deliver_next():
        row = next(todo)
        deliver(str(row.message_id), row.signature)

    blocks = {False: [], True: []}
    for round_ in range(args.rounds):
        for setting in (False, True) if round_ % 2 == 0 else (True, False):
            connection.close()
            connection.settings_dict["OPTIONS"].update(
                server_side_binding=setting, prepare_threshold=5 if setting else None
            )
            for _ in range(WARM):
                deliver_next()
            backend, cpu, wall = backend_cpu(connection), time.process_time(), time.perf_counter()
            for _ in range(args.block):
                deliver_next()
            blocks[setting].append(
                (
                    (time.process_time() - cpu) / args.block * 1000,
                    (backend_cpu(connection) - backend) / args.block * 1000,
                    (time.perf_counter() - wall) / args.block * 1000,
                )
            )
    print(f"{args.rounds} blocks of {args.block} deliveries per setting, medians per delivery:")
    for setting, rows in blocks.items():
        here, server, wall = (statistics.median(row[i] for row in rows) for i in range(3))
        label = "server-side, prepared" if setting else "client-side binding"
        print(
            f"  {label:<21}  CPU here {here:5.2f} ms, PostgreSQL backend {server:5.2f} ms, "
            f"wall {wall:5.2f} ms"
        )


if __name__ == "__main__":
    main()
