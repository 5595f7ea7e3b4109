"""The LangGraph side of bench/chain.py: the same 3-agent chain as a LangGraph graph of three
nodes, checkpointed to PostgreSQL by `PostgresSaver` with `durability="sync"` (each step's
checkpoint is written before the next step starts, as each of our hops commits before the
next is delivered). No LLM work: each node appends its name to the state.

It runs in LangGraph's own virtualenv (bench/chain.py creates it under var/ and starts this
script with its python and -I), never imported by the host. One argument, a JSON object:

    {"dsn": "postgresql://…", "concurrency": 4, "durability": "sync"}

It clears the checkpointer's tables, warms its pool of threads up and prints one line
({"durability": …}); then it runs the commands bench/chain.py sends, one JSON line each on
stdin, {"op": "seq" | "burst" | "approve", "n": chains}, so that chain.py can run both sides in
turn, block by block, and answers each with one JSON line: sequential chains' latencies, this
process's CPU time, the SQL statements and rows the checkpointer wrote; a burst's wall and CPU
time; approve → done latencies (the last node calls interrupt(); `Command(resume=…)` resumes
it).
"""

import concurrent.futures
import json
import operator
import sys
import threading
import time
import uuid
from typing import Annotated, TypedDict

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from psycopg import Connection, sql
from psycopg.rows import dict_row

AGENTS = ("a", "b", "c")
TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


class State(TypedDict):
    parameters: dict
    hops: Annotated[list, operator.add]


def agent(name):
    def node(state):
        return {"hops": [name]}

    return node


def approving_agent(name):
    def node(state):
        decision = interrupt({"approve": f"the result of {name}", "hops": state["hops"]})
        return {"hops": [f"{name} ({decision})"]}

    return node


def build(saver, approve=False):
    graph = StateGraph(State)
    for i, name in enumerate(AGENTS):
        last = i == len(AGENTS) - 1
        graph.add_node(name, approving_agent(name) if approve and last else agent(name))
        graph.add_edge(START if i == 0 else AGENTS[i - 1], name)
    graph.add_edge(AGENTS[-1], END)
    return graph.compile(checkpointer=saver)


def connect(dsn):
    """A connection as PostgresSaver.from_conn_string opens it."""
    return Connection.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)


class Runner:
    """A saver (one connection: the saver serialises its use with a lock) and the graphs, per
    thread, as a multi-threaded LangGraph service would keep them."""

    def __init__(self, dsn, durability):
        self.dsn, self.durability = dsn, durability
        self.local, self.connections = threading.local(), []

    def graphs(self):
        if not hasattr(self.local, "graphs"):
            conn = connect(self.dsn)
            self.connections.append(conn)
            saver = PostgresSaver(conn)
            self.local.graphs = (build(saver), build(saver, approve=True))
        return self.local.graphs

    def chain(self, i, approve=False):
        config = {"configurable": {"thread_id": str(uuid.uuid4())}}
        graph = self.graphs()[1 if approve else 0]
        state = graph.invoke(
            {"parameters": {"i": i}, "hops": []}, config, durability=self.durability
        )
        if not approve and state["hops"] != list(AGENTS):
            raise RuntimeError(f"chain {i} ended with {state['hops']}")
        return graph, config

    def resume(self, graph, config):
        state = graph.invoke(Command(resume="approved"), config, durability=self.durability)
        if len(state["hops"]) != len(AGENTS):
            raise RuntimeError(f"a resumed chain ended with {state['hops']}")

    def close(self):
        for conn in self.connections:
            conn.close()


STATEMENTS = [0]  # SQL statements sent by the checkpointer (execute, and each executemany row)


def count_statements():
    execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def counted_execute(self, query, params=None, **kwargs):
        STATEMENTS[0] += 1
        return execute(self, query, params, **kwargs)

    def counted_executemany(self, query, params_seq, **kwargs):
        params_seq = list(params_seq)
        STATEMENTS[0] += len(params_seq)
        return executemany(self, query, params_seq, **kwargs)

    psycopg.Cursor.execute, psycopg.Cursor.executemany = counted_execute, counted_executemany


def rows_written(dsn):
    with connect(dsn) as conn:
        count = sql.SQL("SELECT count(*) AS n FROM {}")
        return {t: conn.execute(count.format(sql.Identifier(t))).fetchone()["n"] for t in TABLES}


class Commands:
    """What bench/chain.py asks, one JSON line each on stdin, answered on one line of stdout."""

    def __init__(self, runner, concurrency):
        self.runner, self.next = runner, 0
        self.pool = concurrent.futures.ThreadPoolExecutor(concurrency)
        list(self.pool.map(runner.chain, range(-1, -1 - 2 * concurrency, -1)))  # its threads' own

    def ids(self, n):
        self.next += n
        return range(self.next - n, self.next)

    def seq(self, n):
        """n chains one after the other: latencies, CPU, statements and rows written."""
        before, statements = rows_written(self.runner.dsn), STATEMENTS[0]
        latencies, cpu = [], time.process_time()
        for i in self.ids(n):
            start = time.perf_counter()
            self.runner.chain(i)
            latencies.append(time.perf_counter() - start)
        cpu, statements = time.process_time() - cpu, STATEMENTS[0] - statements
        after = rows_written(self.runner.dsn)
        rows = {t: after[t] - before[t] for t in TABLES}
        return {"latencies": latencies, "cpu": cpu, "statements": statements, "rows": rows}

    def burst(self, n):
        """n chains at once on the pool's threads: wall and CPU time."""
        wall, cpu = time.perf_counter(), time.process_time()
        list(self.pool.map(self.runner.chain, self.ids(n)))
        return {"total": time.perf_counter() - wall, "cpu": time.process_time() - cpu}

    def approve(self, n):
        """n chains run to the interrupt (untimed), each resumed: resume → done latencies."""
        latencies = []
        for i in self.ids(n):
            graph, config = self.runner.chain(i, approve=True)
            start = time.perf_counter()
            self.runner.resume(graph, config)
            latencies.append(time.perf_counter() - start)
        return {"latencies": latencies}


def main():
    args = json.loads(sys.argv[1])
    with connect(args["dsn"]) as conn:
        PostgresSaver(conn).setup()
        conn.execute(sql.SQL("TRUNCATE {}").format(sql.SQL(", ").join(map(sql.Identifier, TABLES))))
    count_statements()
    runner = Runner(args["dsn"], args.get("durability", "sync"))
    try:
        commands = Commands(runner, args.get("concurrency", 4))
        print(json.dumps({"durability": runner.durability}), flush=True)
        for line in sys.stdin:
            command = json.loads(line)
            answer = getattr(commands, command["op"])(command["n"])
            print(json.dumps(answer), flush=True)
        commands.pool.shutdown()
    finally:
        runner.close()


if __name__ == "__main__":
    main()
