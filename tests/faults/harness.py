"""The fault harness (issue 18): the host as separate processes — web (daphne), two Celery
workers, beat, the watcher — on this test's PostgreSQL database and on a `redis-server` of its
own, with the reference MCPlets served over streamable HTTP behind a TCP proxy the harness
controls. Partner tasks come in through the A2A API; an approver with a software passkey
approves (or rejects) the held calls through the real ceremony views; meanwhile faults land at
seeded random moments:

    web, worker, beat, watcher, mcp   SIGKILL, then started again
    redis                             SIGKILL and started again empty (its data lost)
    postgres                          pg_terminate_backend on every connection of the host
    stall                             the proxy to the MCP server holds all bytes for a while

After every iteration the invariants are read from ground truth — the MCP server's own call
log (each held call carries its ceremony's idempotency key), what the approver itself did, and
the outbox of task responses — and a failing iteration is named by its seed: replay it with
`CHAOS_SEED=<seed> CHAOS_ITERATIONS=1`.
"""

import collections
import contextlib
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import httpx
import redis
from django.db import Error as DatabaseError
from django.db import connection
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from a2a import messages
from a2a.models import A2AMessage, PartnerKey
from agents.models import AgentRun
from held.models import Ceremony
from mcplet_host.audit import verify_chain
from mcplets.examples.programmable import _server_args
from tests.processes import ROOT, environment, free_port, wait_until

KINDS = ("web", "worker", "beat", "watcher", "mcp", "redis", "postgres", "stall")
HELD_TOOLS = ("send_email", "approve_plan")
TOOL_TIMEOUT = 4  # seconds: a stall longer than this makes a call's outcome unknown
RECOVERY = {"MCPLET_RUN_LEASE": "10", "MCPLET_RECOVERY_GRACE": "3"}
QUIET_TIMEOUT = 90  # seconds an iteration may take to settle after its last fault


def _listening(port):
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


class Service:
    """One child process that the harness kills and starts again (same command, same port)."""

    def __init__(self, name, command, log, env=None, port=None, ready=""):
        self.name, self.command, self.log, self.env = name, command, log, env or {}
        self.port, self.ready = port, ready
        self.process = None
        self.lock = threading.RLock()  # the harness's faults and its supervisor
        self.killed = False  # by a fault, which starts it again itself

    def exited(self):
        """Ended by itself (not by a fault): a supervisor starts it again."""
        with self.lock:
            return not self.killed and self.process is not None and self.process.poll() is not None

    def start(self):
        with self.lock:
            self._start()
            self.killed = False

    def _start(self):
        offset = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(
                self.command, cwd=ROOT, env=self.env, stdout=log, stderr=log
            )
        if self.port:
            wait_until(lambda: _listening(self.port), f"{self.name} to listen", self.process)
        if self.ready:
            wait_until(
                lambda: self.ready in self.log.read_text(errors="replace")[offset:],
                f"{self.name} to be ready",
                self.process,
            )

    def kill(self):
        with self.lock:
            self.killed = True
            self._kill()

    def _kill(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
        if self.port:
            wait_until(lambda: not _listening(self.port), f"{self.name}'s port to close")

    def freeze(self, frozen):
        """SIGSTOP / SIGCONT: the process stays, stopped wherever it stood."""
        with self.lock:
            if self.process and self.process.poll() is None:
                self.process.send_signal(signal.SIGSTOP if frozen else signal.SIGCONT)

    def stop(self):
        self.killed = True
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class Supervisor:
    """What compose's `restart: unless-stopped` does: a service that ended by itself is started
    again. A Celery worker ends with code 1 when its broker comes back empty while it holds an
    unacknowledged task, and counts on this (seed 1086: Celery collects the lost connection,
    which leaves kombu's transport without its client, then closes it again, and the channel's
    restore of its unacked messages fails with an AttributeError in `_connparams`)."""

    def __init__(self, services, restarts):
        self.services, self.restarts = list(services), restarts  # restarts: Counter by name
        self.running = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def start(self):
        self.running.set()
        self.thread.start()
        return self

    def stop(self):
        self.running.clear()
        self.thread.join()

    def _watch(self):
        while self.running.is_set():
            for service in self.services:
                if self.running.is_set() and service.exited():
                    self.restarts[service.name] += 1
                    service.start()
            time.sleep(0.2)


class StallingProxy:
    """A TCP proxy to the MCP server; while `stalled`, no byte goes either way."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.stalled = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _pump(self, source, target):
        try:
            while data := source.recv(65536):
                while self.stalled.is_set():
                    time.sleep(0.05)
                target.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, target):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def close(self):
        self.server.close()


@dataclass
class Tally:
    iterations: int = 0
    faults: collections.Counter = field(default_factory=collections.Counter)
    lost: list = field(default_factory=list)
    doubles: list = field(default_factory=list)
    unapproved: list = field(default_factory=list)
    unanswered: list = field(default_factory=list)
    stuck: list = field(default_factory=list)
    chain_breaks: list = field(default_factory=list)  # (seed, the first break) — checked each time
    restarts: collections.Counter = field(default_factory=collections.Counter)
    inside_lease: int = 0  # approvals that landed while a frozen worker held the run's lease
    failing_seeds: list = field(default_factory=list)

    @property
    def violations(self):
        return (
            self.lost
            + self.doubles
            + self.unapproved
            + self.unanswered
            + self.stuck
            + self.chain_breaks
        )

    @property
    def chain_intact(self):
        return not self.chain_breaks

    def line(self):
        kinds = ", ".join(f"{kind} {self.faults[kind]}" for kind in KINDS if self.faults[kind])
        return (
            f"{self.iterations} iterations, {sum(self.faults.values())} faults ({kinds}), "
            f"{len(self.lost)} lost, {len(self.doubles)} double executions, "
            f"{len(self.unapproved)} unapproved executions, "
            f"{'chain intact' if self.chain_intact else 'CHAIN BROKEN'}"
            + (
                f"; {len(self.unanswered)} unanswered, {len(self.stuck)} stuck"
                if self.unanswered or self.stuck
                else ""
            )
            + f"; {self.inside_lease} approvals inside a held lease"
            + (
                "; exited and restarted: "
                + ", ".join(f"{name} {n}" for name, n in sorted(self.restarts.items()))
                if self.restarts
                else ""
            )
        )


class Approver:
    """A person with a software passkey, approving through the ceremony views over HTTP."""

    def __init__(self, base, session_key, authenticator):
        self.base, self.key = base, authenticator
        self.csrf = secrets.token_hex(16)  # 32 characters a CSRF token may hold
        self.cookies = {"sessionid": session_key, "csrftoken": self.csrf}
        self.approved, self.maybe_approved, self.rejected = set(), set(), set()

    def register(self):
        """A passkey registered through the registration endpoints, on the web's origin."""
        options = self._post("/passkey/register/options/")
        assert options.status_code == 200, options.text
        credential = self.key.create(options.json(), self.base)
        answer = self._post(
            "/passkey/register/verify/", {"name": "chaos", "credential": credential}
        )
        assert answer.status_code == 201, answer.text

    def _post(self, path, body=None):
        return httpx.post(
            self.base + path,
            json=body,
            cookies=self.cookies,
            headers={"X-CSRFToken": self.csrf, "Origin": self.base, "Referer": self.base + "/"},
            timeout=15,
        )

    def decide(self, ceremony, reject):
        token = ceremony.token
        path = f"/passkey/ceremonies/{token}/"
        try:
            if reject:
                if self._post(path + "reject/").status_code == 200:
                    self.rejected.add(token)
                return
            challenge = self._post(path + "challenge/")
            if challenge.status_code != 200:
                return  # decided meanwhile, or the web restarting: asked again next round
            answer = self._post(path + "assertion/", self.key.get(challenge.json(), self.base))
        except httpx.HTTPError:
            if not reject:
                self.maybe_approved.add(token)  # the request may have reached the host
            return
        if answer.status_code == 200:
            self.approved.add(token)
        elif answer.status_code >= 500:
            self.maybe_approved.add(token)


class Chaos:
    def __init__(
        self, workdir, partner, approver_session, authenticator, tools_spec, web_processes=None
    ):
        """`web_processes`: the web as `manage.py serve` with that many processes (bench/load.py);
        None: daphne's one process."""
        self.workdir = workdir
        self.calls_log = workdir / "calls.jsonl"
        self.redis_port, self.web_port, self.mcp_port = free_port(), free_port(), free_port()
        self.base = f"http://localhost:{self.web_port}"
        self.proxy = StallingProxy(self.mcp_port)
        self.partner = partner
        self.tally = Tally()
        self.requests = []  # (message id, partner task) of every task sent
        env = environment(
            REDIS_URL=f"redis://127.0.0.1:{self.redis_port}/0",
            MCPLET_SCRIPT_DIRS=str(workdir),
            MCPLET_TOOL_TIMEOUT=str(TOOL_TIMEOUT),
            PASSKEY_MODE="https",
            PASSKEY_ORIGIN=self.base,
            PASSKEY_RP_ID="localhost",
            MCPLET_A2A_WAIT="0",
            MCPLET_PARTNER_RATE="100000/min",
            DB_CONN_MAX_AGE="60",
            **RECOVERY,
        )
        python = sys.executable
        worker = [python, "-m", "celery", "-A", "mcplet_host", "worker", "-P", "threads", "-c"]
        worker += ["4", "--without-mingle", "--without-gossip", "--loglevel", "INFO", "-n"]
        log = workdir.joinpath
        self.services = {
            "redis": Service(
                "redis",
                ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1"]
                + ["--save", "", "--appendonly", "no"],
                log("redis.log"),
                env,
                self.redis_port,
            ),
            "mcp": Service(
                "mcp",
                [python, *_server_args(tools_spec, 0, self.calls_log)]
                + ["--transport", "streamable-http", "--port", str(self.mcp_port)],
                log("mcp.log"),
                env,
                self.mcp_port,
            ),
            "web": Service(
                "web",
                [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.web_port)]
                + ["mcplet_host.asgi:application"]
                if web_processes is None
                else [python, "manage.py", "serve", "--port", str(self.web_port)]
                + ["--processes", str(web_processes)],
                log("web.log"),
                # As compose: no persistent connections in the web (each request's thread would
                # keep one open; N processes exhaust PostgreSQL's max_connections).
                env if web_processes is None else {**env, "DB_CONN_MAX_AGE": "0"},
                self.web_port,
            ),
            "worker1": Service(
                "worker1", [*worker, "w1@%h"], log("worker1.log"), env, ready="ready."
            ),
            "worker2": Service(
                "worker2", [*worker, "w2@%h"], log("worker2.log"), env, ready="ready."
            ),
            "beat": Service(
                "beat",
                [python, "-m", "celery", "-A", "mcplet_host", "beat", "--loglevel", "INFO"]
                + ["-S", "django_celery_beat.schedulers:DatabaseScheduler"]
                + ["-s", str(workdir / "beat-schedule")],
                log("beat.log"),
                env,
            ),
            "watcher": Service(
                "watcher",
                [python, "manage.py", "watch_mcplets", "--poll", "1"],
                log("watcher.log"),
                env,
            ),
        }
        self.approver = Approver(self.base, approver_session, authenticator)

    @property
    def mcp_url(self):
        return f"http://127.0.0.1:{self.proxy.port}/mcp"

    # --- the processes ---------------------------------------------------------------------

    def __enter__(self):
        every_second, _ = IntervalSchedule.objects.get_or_create(every=1, period="seconds")
        for name, task in (
            ("Recover lost agent work", "agents.recover"),
            ("Recover lost tool calls", "mcplet_host.recover_calls"),
            ("Expire unapproved tool calls", "mcplet_host.expire_ceremonies"),
        ):
            PeriodicTask.objects.update_or_create(
                name=name, defaults={"task": task, "interval": every_second, "enabled": True}
            )
        for service in self.services.values():
            if service.process is None:  # the MCP server is up before the registry
                service.start()
        self.approver.register()
        self.supervisor = Supervisor(self.services.values(), self.tally.restarts).start()
        return self

    def __exit__(self, *exc):
        self.supervisor.stop()
        for service in reversed(self.services.values()):
            service.stop()
        self.proxy.close()

    # --- faults ----------------------------------------------------------------------------

    def fault(self, kind, rng):
        self.tally.faults[kind] += 1
        if kind == "postgres":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            return
        if kind == "stall":
            self.proxy.stalled.set()
            time.sleep(rng.uniform(0.5, TOOL_TIMEOUT + 2))
            self.proxy.stalled.clear()
            return
        service = self.services[rng.choice(["worker1", "worker2"]) if kind == "worker" else kind]
        service.kill()
        time.sleep(rng.uniform(0, 1.5))
        service.start()

    # --- one iteration ---------------------------------------------------------------------

    def send(self, agent_id, rng):
        body = messages.task_request(
            self.partner.agent_id, agent_id, {"store": f"shop-{rng.randrange(10**6)}"}
        )
        message_id = body["messageId"]
        deadline = time.monotonic() + 60
        while True:  # a resubmission with the same messageId never runs twice
            try:
                answer = httpx.post(
                    f"{self.base}/a2a/tasks",
                    json=body,
                    headers={"Authorization": f"Bearer {self.partner.raw_key}"},
                    timeout=15,
                )
                if answer.status_code in (200, 202):
                    self.requests.append(message_id)
                    return message_id
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"the partner API never took {message_id}"
            time.sleep(0.3)

    def iteration(self, seed):
        rng = random.Random(seed)
        sent = []
        faults = [(rng.uniform(0, 4), rng.choice(KINDS)) for _ in range(rng.choice((1, 1, 2)))]
        started = time.monotonic()
        restarts = sum(self.tally.restarts.values())
        errors = []

        def inject():
            try:
                for at, kind in sorted(faults):
                    time.sleep(max(0, started + at - time.monotonic()))
                    self.fault(kind, rng)
            except Exception as exc:  # reported with the iteration's seed
                errors.append(exc)

        injector = threading.Thread(target=inject)
        injector.start()
        for _ in range(rng.randint(2, 4)):
            sent.append(self.send(rng.choice(["dispatch-agent", "planning-agent"]), rng))
        deadline = time.monotonic() + QUIET_TIMEOUT
        settled, next_round = False, 0
        while not settled and time.monotonic() < deadline:
            self._approve_inside_the_lease(sent)
            if time.monotonic() >= next_round:
                self._decide_pending(sent, rng)
                settled = not injector.is_alive() and self._settled(sent)
                next_round = time.monotonic() + 0.2
            time.sleep(0.005)
        injector.join()
        connection.close()  # the harness's own connection may have been terminated
        assert not errors, f"seed {seed}: the harness failed: {errors}"
        before = len(self.tally.violations)
        if not settled:
            self.tally.stuck.append((seed, f"not settled in {QUIET_TIMEOUT} s"))
        self.check(sent, seed)
        self.tally.iterations += 1
        if len(self.tally.violations) > before:
            self.tally.failing_seeds.append(seed)
        print(
            f"seed {seed}: {len(sent)} tasks, faults {[kind for _, kind in sorted(faults)]}, "
            f"{time.monotonic() - started:.1f} s"
            + ("" if settled else " (NOT SETTLED)")
            + (
                f", {sum(self.tally.restarts.values()) - restarts} exited and restarted"
                if sum(self.tally.restarts.values()) > restarts
                else ""
            ),
            flush=True,
        )

    def _ceremonies(self, sent):
        """The held calls and results of the runs of these task requests."""
        runs = {
            str(pk)
            for pk in AgentRun.objects.filter(request__message_id__in=sent).values_list(
                "pk", flat=True
            )
        }
        held = Ceremony.objects.exclude(continuation_ref="")
        return [c for c in held if c.continuation_ref.partition(":")[0] in runs]

    def _approve_inside_the_lease(self, sent):
        """Issue 18's race, aimed at: a run just left waiting whose worker has not let go of its
        lease yet. Both workers are frozen there (SIGSTOP), the call is approved through the
        web, and the workers go on one after the other, in turns: when the other one goes first
        it meets the held lease with the continuation. The run must continue all the same."""
        try:
            run = (
                AgentRun.objects.filter(
                    request__message_id__in=sent,
                    status=AgentRun.Status.AWAITING_APPROVAL,
                    waiting_for__status=Ceremony.Status.PENDING,
                )
                .exclude(lease_owner="")
                .select_related("waiting_for")
                .first()
            )
            if run is None:
                return
            workers = [self.services["worker1"], self.services["worker2"]]
            for worker in workers:
                worker.freeze(True)
            try:
                if not AgentRun.objects.filter(pk=run.pk, lease_owner=run.lease_owner).exists():
                    return  # let go before the freeze: missed
                self.approver.decide(run.waiting_for, reject=False)
                if run.waiting_for.token in self.approver.approved:
                    self.tally.inside_lease += 1
            finally:
                if self.tally.inside_lease % 2:
                    workers.reverse()
                for worker in workers:
                    worker.freeze(False)
                    time.sleep(0.3)
        except DatabaseError:  # the harness's connection terminated by a fault: next round
            connection.close()

    def _decide_pending(self, sent, rng):
        try:
            pending = [c for c in self._ceremonies(sent) if c.status == Ceremony.Status.PENDING]
        except Exception:  # the harness's connection terminated by a fault: next round
            connection.close()
            return
        for ceremony in pending:
            # One in six is rejected: a rejected call must never run.
            self.approver.decide(ceremony, reject=rng.random() < 1 / 6)

    def _settled(self, sent):
        try:
            answered = A2AMessage.objects.filter(
                reply_to__in=sent, type=A2AMessage.Type.TASK_RESPONSE
            ).count()
        except Exception:
            connection.close()
            return False
        return answered == len(sent)

    # --- the invariants ----------------------------------------------------------------------

    def executions(self):
        """The MCP server's own log: held calls by their idempotency key."""
        if not self.calls_log.exists():
            return collections.Counter(), []
        keys, unkeyed = collections.Counter(), []
        for line in self.calls_log.read_text().splitlines():
            call = json.loads(line)
            if call["name"] not in HELD_TOOLS:
                continue
            key = (call.get("meta") or {}).get("idempotencyKey")
            if key:
                keys[key] += 1
            else:
                unkeyed.append(call)
        return keys, unkeyed

    def check(self, sent, seed):
        tally, approver = self.tally, self.approver
        keys, unkeyed = self.executions()
        tally.doubles = [(key, n) for key, n in keys.items() if n > 1]
        allowed = approver.approved | approver.maybe_approved
        tally.unapproved = [key for key in keys if key not in allowed] + unkeyed
        for key in approver.rejected & set(keys):
            tally.unapproved.append(key)
        ceremonies = {c.token: c for c in self._ceremonies(sent)}
        for token in approver.approved & set(ceremonies):
            ceremony = ceremonies[token]
            if token in keys or ceremony.kind == Ceremony.Kind.RESULT:
                continue
            # Not run: it must have ended with an error the agent and the operator see.
            if not (ceremony.is_final and ceremony.error):
                run = AgentRun.objects.filter(waiting_for=ceremony).first()
                tally.lost.append((seed, token, ceremony.status, run and run.status))
        for message_id in sent:
            responses = A2AMessage.objects.filter(
                reply_to=message_id, type=A2AMessage.Type.TASK_RESPONSE
            ).count()
            run = AgentRun.objects.filter(request__message_id=message_id).first()
            waiting = (
                run is not None
                and run.status == AgentRun.Status.AWAITING_APPROVAL
                and run.waiting_for is not None
                and run.waiting_for.status == Ceremony.Status.PENDING
            )
            if responses != 1 and not waiting:
                tally.unanswered.append((seed, message_id, responses))
        stuck = list(
            AgentRun.objects.filter(request__message_id__in=sent, status=AgentRun.Status.RUNNING)
        ) + list(
            Ceremony.objects.filter(
                status__in=(Ceremony.Status.APPROVED, Ceremony.Status.EXECUTING)
            )
        )
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                stuck.append("a session waits on a lock")
        # A singleton lock (mcplet_host.locks) whose holder died must still expire by itself.
        broker = redis.Redis(port=self.redis_port)
        stuck += [
            f"Redis lock {key.decode()} never expires"
            for key in broker.scan_iter("mcplet:lock:*")
            if broker.ttl(key) < 0
        ]
        tally.stuck += [(seed, str(s)) for s in stuck]
        _, broken = verify_chain()
        if broken and tally.chain_intact:  # once broken it stays broken: the first seed is named
            tally.chain_breaks.append((seed, str(broken)))


def partner_key(agent):
    key, raw = PartnerKey.issue(agent, "chaos")
    agent.raw_key = raw
    return agent


def iterations():
    return int(os.environ.get("CHAOS_ITERATIONS", "10"))


def base_seed():
    return int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(10**9))


def write_script(path):
    path.write_text(
        json.dumps(
            {
                "agents": {
                    "dispatch-agent": [
                        {
                            "json": {
                                "summary": "one e-mail",
                                "actions": [
                                    {
                                        "tool": "send_email",
                                        "arguments": {"to": ["sato@example.jp"], "body": "dessert"},
                                    }
                                ],
                            }
                        }
                    ],
                    "info-gathering-agent": [
                        {"tool_calls": [{"name": "query_crm", "arguments": {"filter": "rain"}}]},
                        {"json": {"analysis": "rain"}},
                    ],
                    "planning-agent": [
                        {"tool_calls": [{"name": "approve_plan", "arguments": {}}]},
                        {"json": {"plan": "done"}},
                    ],
                }
            }
        )
    )
