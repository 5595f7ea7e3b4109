"""Reference scenario benchmark: the whole restaurant scenario, from the Director's cycle to the
sent e-mails, with the scripted model and approvals signed by a software authenticator.

    SECRET_KEY=bench .venv/bin/python bench/scenario.py [--runs 20] [--profile [--top 25]]

One scenario is what tests/restaurant/test_reference_scenario.py checks: `director.run_cycle`
(the Director → the information agent, five tool calls → the planning agent, one tool call, its
plan held for approval); the store manager approves the plan (challenge and assertion through
the real passkey views, signed by tests/passkey/authenticator.py's SoftAuthenticator); the
dispatch agent reads the site statistics and asks to send the e-mail; the manager approves that
with the passkey; the mail MCPlet has the host's /auth/verify-assertion confirm the assertion,
and the backing service sends one e-mail per at-risk guest (10 with the shipped data).

What runs: the eight reference MCPlets over stdio, seeded with `seed_reference` and discovered
for real; the backing service and the host's WSGI application, each in threads of this process
on a free port (the mail MCPlet calls the host back); Celery with task_always_eager, as the
test's `eager` fixture, so the bus and the continuations run in this thread at each commit;
passkeys in https mode on a made-up origin; e-mails (as .eml files) and the approvers' notices
in a temp dir.

Per scenario (one untimed warm-up scenario first, then `--runs`), it times the wall clock and:

* MCP servers: the time inside `pools.sessions.sessions.call_tool` (the MCP round trip, the
  MCPlet, the backing service and its SMTP sink), minus the time the host spent serving the
  verify-assertion requests meanwhile (the whole WSGI request);
* the model: the time inside `litellm.completion` as agents.llm calls it (litellm and the
  scripted provider);
* the host: the rest — Django, the gateway, the agents' loop, the bus, the passkey views, the
  database. The host share is host / wall per scenario; the median is printed.

Scenarios do not reset anything in between: each Director cycle is a workflow of its own (its
contextId, ceremonies and idempotency keys). Only the seeded pools' rate limits are raised to
1,000,000 calls a minute (the check itself still runs), because more than 30 scenarios in a
minute would meet media-pool's 60.

The database is a throwaway SQLite file unless DATABASE_URL is set (a PostgreSQL database is
created if missing, and the agents, A2A, passkey, registry, audit and user tables are emptied
first). Without REDIS_URL the host runs embedded (local-memory cache and locks); with it, Redis
holds them (tasks stay eager). Nothing is asserted, but a scenario that does not end with the
e-mails sent stops the benchmark with exit status 2 and the reason. `--profile` runs one more
scenario under cProfile (this thread: MCP calls show as waiting on a lock, the model under
`litellm.completion`).
"""

import argparse
import contextlib
import cProfile
import io
import logging
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.common

from bench import common

PASSKEY_ORIGIN = "https://approve.example.test"
PASSKEY_RP_ID = "approve.example.test"
SCRIPT = common.ROOT / "agents" / "scripts" / "reference.yaml"
SCRIPT_API_URL = "${RESTAURANT_API_URL}"  # where the script fetches the forecast from
TABLES = (
    "agents.AgentRun",
    "a2a.A2AMessage",
    "a2a.PartnerKey",
    "held.Ceremony",
    "passkey.PasskeyCredential",
    "passkey.BackendToken",
    "pools.Mcplet",
    "pools.McpServer",
    "pools.Pool",
    "agents.Agent",
    "mcplet_host.AuditEvent",
    "mcplet_host.AuditChainHead",
    "auth.User",
)
COUNTS = (
    ("tool calls", "tool calls (MCP)"),
    ("LLM calls", "LLM calls"),
    ("verify", "verify-assertion requests"),
    ("e-mails", "e-mails sent"),
)


class Failed(Exception):
    """A scenario did not end with the e-mails sent; the message says where it stopped."""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="timed scenarios")
    parser.add_argument(
        "--profile", action="store_true", help="then one more scenario under cProfile"
    )
    parser.add_argument("--top", type=int, default=25, help="rows of profile output")
    return parser.parse_args(argv)


# --- set-up -----------------------------------------------------------------------------------


def configure(workdir):
    """What settings.py and the backing service read from the environment: https passkeys on
    the test's made-up origin, the scripted model reading the bench's copy of the script, the
    outbox in `workdir` and no SMTP relay (the backing service's sink writes .eml files)."""
    scripts = workdir / "scripts"
    scripts.mkdir()
    os.environ.update(
        {
            "PASSKEY_MODE": "https",
            "PASSKEY_ORIGIN": PASSKEY_ORIGIN,
            "PASSKEY_RP_ID": PASSKEY_RP_ID,
            "MCPLET_LLM_MODEL": "scripted/reference",
            "MCPLET_SCRIPT_DIRS": str(scripts),
            "RESTAURANT_OUTBOX": str(workdir / "outbox"),
        }
    )
    for name in ("SMTP_HOST", "RESTAURANT_API_TOKEN"):
        os.environ.pop(name, None)
    return scripts


@contextlib.contextmanager
def host_server(stopwatch):
    """The host's WSGI application on a free port, served from threads of this process and
    timed by `stopwatch`: the mail MCPlet calls its /auth/verify-assertion."""
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler

    server = ThreadedWSGIServer(("127.0.0.1", 0), WSGIRequestHandler)
    server.set_app(stopwatch.wrap(WSGIHandler()))
    threading.Thread(target=server.serve_forever, name="host-wsgi", daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def backing_service():
    from mcplets.restaurant import backend

    server, url = backend.serve_in_thread()
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()


def seed(scripts, api_url, host_url):
    """The reference configuration pointed at this run's services, its servers discovered, and
    the script fetching the forecast from this run's backing service; returns the discovery
    reports."""
    from django.core.management import call_command

    from pools.discovery import discover
    from pools.models import McpServer, Pool

    script = SCRIPT.read_text(encoding="utf-8").replace(SCRIPT_API_URL, api_url)
    (scripts / "reference.yaml").write_text(script, encoding="utf-8")
    verify_url = f"{host_url}/auth/verify-assertion"
    call_command("seed_reference", api_url=api_url, verify_url=verify_url, stdout=io.StringIO())
    Pool.objects.update(rate_limit_per_minute=1_000_000)
    servers = McpServer.objects.filter(name__startswith="restaurant-").order_by("name")
    return [discover(server) for server in servers]


def register_manager():
    """The store manager: may approve, with a software passkey registered through the real
    views (the test's `manager` fixture)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.test import Client

    from tests.passkey.authenticator import SoftAuthenticator

    user = get_user_model().objects.create_user("tencho", "tencho@example.jp", "pw-manager-1")
    user.user_permissions.add(Permission.objects.get(codename="approve_ceremony"))
    client, key = Client(SERVER_NAME="127.0.0.1"), SoftAuthenticator()
    client.force_login(user)
    options = client.post("/passkey/register/options/").json()
    response = client.post(
        "/passkey/register/verify/",
        {"name": "store phone", "credential": key.create(options, PASSKEY_ORIGIN)},
        content_type="application/json",
    )
    if response.status_code != 201:
        common.refuse(f"registering the manager's passkey failed: {response.content.decode()}")
    return client, key


# --- one scenario -----------------------------------------------------------------------------


def approve(manager, ceremony):
    """What the ceremony page does when the manager approves: challenge, then assertion."""
    client, key = manager
    url = f"/passkey/ceremonies/{ceremony.token}/"
    options = client.post(url + "challenge/")
    if options.status_code != 200:
        raise Failed(f"the challenge of {ceremony} was refused: {options.content.decode()}")
    response = client.post(
        url + "assertion/",
        key.get(options.json(), PASSKEY_ORIGIN),
        content_type="application/json",
        HTTP_ORIGIN=PASSKEY_ORIGIN,
    )
    if response.status_code != 200:
        raise Failed(f"the approval of {ceremony} was refused: {response.content.decode()}")


def pending(context_id, what):
    """The one approval this workflow waits for, or Failed with where its runs stand."""
    from agents.models import AgentRun
    from held.models import Ceremony

    ceremony = Ceremony.objects.filter(trace_id=context_id, status=Ceremony.Status.PENDING).first()
    if ceremony is None:
        runs = AgentRun.objects.filter(context_id=context_id).order_by("started_at")
        where = "; ".join(f"{r.agent.agent_id} {r.status} {r.error or ''}".strip() for r in runs)
        raise Failed(f"no approval of {what} is pending (runs: {where or 'none'})")
    return ceremony


def scenario(manager):
    """Director → information → planning → approve the plan → dispatch → approve the e-mail;
    returns the Director's cycle and the send_email ceremony."""
    from agents import director

    cycle = director.run_cycle("director")
    if cycle.outcome != "ran":
        raise Failed(f"the Director's cycle did not run: {cycle}")
    approve(manager, pending(cycle.context_id, "the plan"))
    email = pending(cycle.context_id, "the e-mail")
    approve(manager, email)
    return cycle, email


def check(cycle, email, sent):
    """Failed unless the e-mail call ran, the dispatch run succeeded and every recipient's
    message reached the outbox."""
    from agents.models import AgentRun
    from held.models import Ceremony

    email.refresh_from_db()
    if email.tool_name != "send_email" or email.status != Ceremony.Status.EXECUTED:
        raise Failed(f"the {email.tool_name} call ended {email.status}: {email.result}")
    dispatch = AgentRun.objects.filter(
        context_id=cycle.context_id, agent__agent_id="dispatch-agent"
    ).first()
    if dispatch is None or dispatch.status != AgentRun.Status.SUCCESS:
        raise Failed(f"the dispatch run ended {getattr(dispatch, 'status', 'missing')}")
    expected = len(email.arguments["to"])
    if sent != expected:
        raise Failed(f"{sent} e-mail(s) reached the outbox, not {expected}")


def measure(manager, outbox, watches, profiler=None):
    """One scenario, timed; its seconds and counts."""
    for watch in watches.values():
        watch.reset()
    before = len(list(outbox.glob("*.eml")))
    if profiler:
        profiler.enable()
    start = time.perf_counter()
    cycle, email = scenario(manager)
    wall = time.perf_counter() - start
    if profiler:
        profiler.disable()
    sent = len(list(outbox.glob("*.eml"))) - before
    check(cycle, email, sent)
    mcp = watches["mcp"].seconds - watches["served"].seconds
    model = watches["model"].seconds
    return {
        "wall": wall,
        "mcp": mcp,
        "model": model,
        "host": wall - mcp - model,
        "share": (wall - mcp - model) / wall,
        "tool calls": watches["mcp"].calls,
        "LLM calls": watches["model"].calls,
        "verify": watches["served"].calls,
        "e-mails": sent,
    }


# --- report -----------------------------------------------------------------------------------


def print_results(runs):
    title = f"seconds per scenario ({len(runs)} scenarios)"
    print(f"\n{title:<40} {'median':>8} {'p95':>8} {'min':>8}")
    for key, label in (
        ("wall", "whole scenario (wall clock)"),
        ("mcp", "MCP servers"),
        ("model", "model (litellm)"),
        ("host", "host (the rest)"),
    ):
        figures = common.stats([run[key] for run in runs])
        print(f"  {label:<38} {figures['median']:8.3f} {figures['p95']:8.3f} {figures['min']:8.3f}")
    share = statistics.median(run["share"] for run in runs)
    print(f"host share: {share * 100:.1f} % (median over the scenarios of host / wall)")
    counts = []
    for key, label in COUNTS:
        values = [run[key] for run in runs]
        spread = f" ({min(values)}–{max(values)})" if min(values) != max(values) else ""
        counts.append(f"{label} {statistics.median(values):g}{spread}")
    print(f"per scenario: {', '.join(counts)}")


def main(argv=None):
    args = parse_args(argv)
    if args.runs < 1:
        common.refuse("--runs must be at least 1")
    with common.scratch("mcplet-bench-scenario-") as workdir, contextlib.ExitStack() as stack:
        scripts = configure(workdir)
        common.setup_django(workdir, flush=TABLES)
        # A line per task, run, resumption and request would drown the figures (and levels set
        # here would not last: Celery sets Django up again, which reapplies LOGGING).
        logging.disable(logging.INFO)
        logging.getLogger("kombu").setLevel(logging.ERROR)  # "No hostname was supplied"
        import litellm
        from django.conf import settings

        from mcplet_host.celery import app
        from pools.sessions import sessions

        settings.EMAIL_FILE_PATH = str(workdir / "notices")  # the approvers' notices
        app.conf.task_always_eager = app.conf.task_eager_propagates = True
        watches = {
            "mcp": common.Stopwatch(),
            "model": common.Stopwatch(),
            "served": common.Stopwatch(),
        }
        stack.callback(sessions.close_all)  # the MCPlets' stdio processes
        host_url = stack.enter_context(host_server(watches["served"]))
        api_url = stack.enter_context(backing_service())
        reports = seed(scripts, api_url, host_url)
        manager = register_manager()
        cache = settings.CACHES["default"]["BACKEND"].rsplit(".", 1)[-1]
        print(f"database: {common.describe_database()}; cache: {cache}; Celery tasks eager")
        print(
            f"MCPlets: {len(reports)} stdio servers, {sum(r.accepted for r in reports)} tools "
            f"accepted, {sum(r.rejected for r in reports)} rejected; model "
            f"{settings.MCPLET_LLM_MODEL}; backing service {api_url}; host {host_url}; "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
        )
        stack.enter_context(
            mock.patch.object(sessions, "call_tool", watches["mcp"].wrap(sessions.call_tool))
        )
        stack.enter_context(
            mock.patch.object(litellm, "completion", watches["model"].wrap(litellm.completion))
        )
        outbox = Path(os.environ["RESTAURANT_OUTBOX"])
        try:
            warmup = measure(manager, outbox, watches)
            print(
                f"warm-up scenario: {warmup['wall']:.2f} s; {args.runs} scenarios ...", flush=True
            )
            runs = [measure(manager, outbox, watches) for _ in range(args.runs)]
            print_results(runs)
            print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f}")
            if args.profile:
                profiler = cProfile.Profile()
                measure(manager, outbox, watches, profiler)
                common.print_profile(profiler, "cProfile, one scenario, this thread", args.top)
        except Failed as failure:
            common.refuse(f"a scenario did not end with the e-mails sent: {failure}")


if __name__ == "__main__":
    main()
