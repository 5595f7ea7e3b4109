"""bench/bus.py's host-side pieces, timed in process with no worker: schema validation,
signing, verification, an insert, `send_task` with the publish stubbed, and `agents.deliver`
broken down by step with its SQL statements (also used by bench/chain.py)."""

import contextlib
import cProfile
import statistics
import time
from collections import defaultdict
from unittest import mock

from bench import common

SENDER = "bench-sender"
ECHO = "bench-echo"


class Breakdown:
    """Wraps functions so their time inside each delivered message is summed per label."""

    def __init__(self):
        self.watches = defaultdict(common.Stopwatch)
        self.per_message = defaultdict(list)

    def patches(self):
        from a2a import bus
        from agents import runner
        from agents.models import AgentRun
        from mcplet_host import audit

        targets = [
            ("authenticate", bus, "authenticate"),
            ("start", runner, "start"),
            ("advance", runner, "advance_started"),
            ("claim", AgentRun, "claim"),
            ("release", AgentRun, "release"),
            ("finish", runner, "finish"),
            ("respond", bus, "respond"),
            ("audit", audit, "record_many"),
            ("post", bus, "post"),
        ]
        stack = contextlib.ExitStack()
        for label, owner, name in targets:
            timed = self.watches[label].wrap(getattr(owner, name))
            stack.enter_context(mock.patch.object(owner, name, timed))
        return stack

    def end_message(self, total):
        self.per_message["deliver"].append(total)
        for label, watch in self.watches.items():
            self.per_message[label].append(watch.seconds)
            watch.reset()


def lookup_agent(agent_id):
    from agents.models import Agent

    return Agent.objects.filter(agent_id=agent_id).first()


def commits(statements):
    """Transactions committed by a list of SQL statements run in autocommit mode: each explicit
    BEGIN … COMMIT, and each write outside one (a WITH here writes: mcplet_host.guarded)."""
    count, inside = 0, False
    for sql in statements:
        word = sql.split(None, 1)[0].upper()
        if word == "BEGIN":
            inside = True
        elif word == "COMMIT":
            count, inside = count + 1, False
        elif word in ("INSERT", "UPDATE", "DELETE", "WITH") and not inside:
            count += 1
    return count


def timed_loop(n, func):
    times = []
    for i in range(n):
        start = time.perf_counter()
        func(i)
        times.append(time.perf_counter() - start)
    return times


def host_pieces(n, sink, profile=False):
    """Time the host-side pieces of one message in this process; returns (rows, queries,
    breakdown, profiler). `sink` is a queue no worker reads, for the publish alone."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from a2a import bus, messages
    from a2a.models import A2AMessage
    from a2a.schemas import validate
    from agents.tasks import deliver
    from mcplet_host.celery import app

    key = bus.signing_key()
    request = messages.task_request(SENDER, ECHO, {"i": 0})
    signature = messages.sign(request, key)
    rows = []

    def piece(label, func, count=n):
        timed_loop(min(count, 20), func)  # warm-up
        cpu = time.process_time()
        times = timed_loop(count, func)
        rows.append((label, {**common.stats(times), "cpu": (time.process_time() - cpu) / count}))

    cpu = max(n, 1000)
    piece("schema validation of a task_request", lambda i: validate("task-request", request), cpu)
    piece(
        "build task_request (JSON copy + validation)",
        lambda i: messages.task_request(SENDER, ECHO, {"i": i}),
        cpu,
    )
    piece("signing key (salted_hmac of SECRET_KEY)", lambda i: bus.signing_key(), cpu)
    piece("sign (HMAC-SHA256 of canonical JSON)", lambda i: messages.sign(request, key), cpu)
    piece("verify", lambda i: messages.verify(request, signature, key), cpu)
    piece(
        "build task_response (validates request + response)",
        lambda i: messages.task_response(request, "success", result={"echo": {"i": i}}),
        cpu,
    )
    fresh = [messages.task_request(SENDER, ECHO, {"i": i}) for i in range(n + 20)]

    def insert(i):
        message = fresh[i]
        A2AMessage.objects.create(
            message_id=message["messageId"],
            context_id=message["contextId"],
            type=A2AMessage.Type.TASK_REQUEST,
            sender_id=SENDER,
            recipient_id=ECHO,
            body=message,
            signature=signature,
        )

    inserted = iter(range(n + 20))
    piece("A2AMessage insert (one autocommit INSERT)", lambda i: insert(next(inserted)))
    A2AMessage.objects.filter(message_id__in=[m["messageId"] for m in fresh]).delete()

    sent = []
    with mock.patch.object(bus, "enqueue"):
        piece(
            "bus.send_task, publish stubbed (build, validate, sign, insert)",
            lambda i: sent.append(bus.send_task(SENDER, ECHO, {"i": i})),
        )
        with CaptureQueriesContext(connection) as send_queries:
            sent.append(bus.send_task(SENDER, ECHO, {"i": -1}))
    # Unit costs, to turn statement counts into time: one ORM look-up, one autocommit UPDATE.
    piece("one ORM SELECT (Agent by agent_id, all columns)", lambda i: lookup_agent(ECHO))
    piece(
        "reconnect + that SELECT (what the worker pays per task)",
        lambda i: (connection.close(), lookup_agent(ECHO)),
    )
    piece(
        "one autocommit UPDATE (A2AMessage.state, same value)",
        lambda i: A2AMessage.objects.filter(pk=sent[i].pk).update(state=A2AMessage.State.QUEUED),
    )
    deliver_task = app.tasks[bus.DELIVER_TASK]
    piece(
        "broker publish of agents.deliver (apply_async, no worker)",
        lambda i: deliver_task.apply_async(
            [str(sent[i].message_id), sent[i].signature], queue=sink
        ),
    )
    common.delete_queues(sink)

    # The worker side, in process: what agents.deliver does for one message, minus the broker.
    warm, runs = min(20, n), n + 1 + (n if profile else 0)
    with mock.patch.object(bus, "enqueue"):
        sent += [bus.send_task(SENDER, ECHO, {"i": i}) for i in range(warm + runs - len(sent))]
    todo = iter(sent)

    def deliver_one(i=0):
        row = next(todo)
        deliver(str(row.message_id), row.signature)

    timed_loop(warm, deliver_one)
    breakdown = Breakdown()
    cpu = time.process_time()
    with breakdown.patches():
        for _ in range(n):
            start = time.perf_counter()
            deliver_one()
            breakdown.end_message(time.perf_counter() - start)
    label = "agents.deliver in process (worker side, no broker)"
    cpu = (time.process_time() - cpu) / n
    rows.append((label, {**common.stats(breakdown.per_message["deliver"]), "cpu": cpu}))
    with CaptureQueriesContext(connection) as deliver_queries:
        deliver_one()
    profiler = None
    if profile:
        profiler = cProfile.Profile(
            time.process_time
        )  # CPU time: waits on the database are not hot
        profiler.enable()
        for _ in range(n):
            deliver_one()
        profiler.disable()
    queries = {"send_task": send_queries, "deliver": deliver_queries}
    return rows, queries, breakdown, profiler


# --- report -----------------------------------------------------------------------------------


def us(seconds):
    return f"{seconds * 1e6:>9.0f}"


def ms(seconds):
    return f"{seconds * 1e3:>8.2f}"


def print_pieces(rows, queries, breakdown):
    print("\n1. Host-side pieces of one message, timed in this process (no worker running)")
    head = f"   {'piece':<64} {'median µs':>9} {'p95 µs':>9} {'mean µs':>9} {'CPU µs':>9}"
    print(head)
    print("   " + "-" * (len(head) - 3))
    for label, s in rows:
        print(f"   {label:<64} {us(s['median'])} {us(s['p95'])} {us(s['mean'])} {us(s['cpu'])}")

    print_breakdown(breakdown, "agents.deliver in process, broken down (mean per message):")
    print_queries(queries)


def print_breakdown(breakdown, title):
    """The mean time per delivered message in each step of agents.deliver (`Breakdown`)."""
    mean = {k: statistics.fmean(v) for k, v in breakdown.per_message.items()}

    def get(label):
        return mean.get(label, 0.0)

    deliver = get("deliver")
    finish_rest = get("finish") - get("respond") - get("audit") - get("post")
    advance_rest = get("advance") - get("claim") - get("release") - get("finish")
    deliver_rest = deliver - get("authenticate") - get("start") - get("advance")
    tree = [
        ("agents.deliver, whole", deliver),
        ("  bus.authenticate (SELECT request, verify signature)", get("authenticate")),
        ("  sender + recipient look-up (1 SELECT), rest of deliver", deliver_rest),
        ("  runner.start (request marked delivered + run INSERT: one statement)", get("start")),
        ("  runner.advance_started", get("advance")),
        ("    AgentRun.claim (UPDATE lease; a redelivery's only)", get("claim")),
        ("    ending.finish (one statement on PostgreSQL, from the Echo handler)", get("finish")),
        ("      the run's end (with all below, on PostgreSQL) and the rest", finish_rest),
        ("      bus.respond (finish's transaction: SQLite, a hand-off)", get("respond")),
        ("      audit.record_many (finish's transaction: SQLite, a hand-off)", get("audit")),
        ("      hand-off: bus.post to the next agent (validate, sign, INSERT)", get("post")),
        ("    AgentRun.release (UPDATE)", get("release")),
        ("    the handler and the rest (the run as started: no read)", advance_rest),
    ]
    print(f"\n   {title}")
    for label, seconds in tree:
        share = seconds / deliver * 100 if deliver else 0
        if seconds or "hand-off" not in label:
            print(f"   {label:<64} {us(seconds)} µs {share:>5.0f}%")


def print_queries(queries, listed=None):
    """Each named capture's SQL statements: how many of each kind, the commits, and the text
    (of those named in `listed`, by default all)."""
    for name, captured in queries.items():
        statements = [q["sql"] for q in captured.captured_queries]
        kinds = defaultdict(int)
        for sql in statements:
            kinds[sql.split(None, 1)[0].upper()] += 1
        summary = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
        print(
            f"\n   {name}: {len(statements)} statements ({summary}), {commits(statements)} commits"
        )
        for sql in statements if listed is None or name in listed else ():
            text = " ".join(sql.split())
            print(f"     {text[:110]}{'…' if len(text) > 110 else ''}")
