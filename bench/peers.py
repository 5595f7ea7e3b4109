"""Peers benchmark: the per-call overhead of our gateway beside IBM ContextForge's, in one run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/mcplet_bench \\
        REDIS_URL=redis://127.0.0.1:6379/0 SECRET_KEY=bench \\
        .venv/bin/python bench/peers.py [--calls 300] [--rounds 10]
        [--variants defaults,audit,stateful,audit-all] [--keep]

One MCP server (bench/gateway.py's: one read tool over streamable HTTP) is called `--calls`
times by each path, all from this process with the `mcp` client:

- direct: one client session to the server;
- gateway: `gateway.call_tool` (checks, rate limit, session pool, envelope, audit), as in
  bench/gateway.py, on a thread of its own (Django's ORM refuses a running event loop);
- contextforge <variant>: one client session to a ContextForge virtual server that holds the
  same tool, authenticated with a JWT it minted, one ContextForge process per variant:
  `defaults` (its own defaults: stateless streamable HTTP, JSON responses, so a new upstream
  MCP session per call), `audit` (AUDIT_TRAIL_ENABLED=true), `stateful`
  (USE_STATEFUL_SESSIONS=true: the upstream session is kept for the client's session) and
  `audit-all` (the audit trail and PERMISSION_AUDIT_ENABLED=true).

The calls go in `--rounds` rounds; each round gives every path its share in turn, the order
rotating from round to round, so that a change of machine load hits all paths alike. It prints
median, p95, mean and calls/s per path, the median's overhead over direct and the ratio, and CPU
per call: this process's (the client, plus the whole gateway for `gateway`) and the peer's
process tree. PostgreSQL's and the MCP server's CPU are not counted.

ContextForge (the package `mcp-contextforge-gateway`, pinned below) runs in its own virtualenv,
var/contextforge, created on first use from the package registry with a Python 3.12 or 3.13
(CONTEXTFORGE_PYTHON, else python3.12/3.13 on PATH or pyenv's) and reused while its marker
file matches. Each variant runs as `mcpgateway` (uvicorn, one process) on a free port with a
SQLite file in the scratch directory, fresh random secrets, its bootstrap admin, localhost
allowed as an upstream (SSRF_ALLOW_LOCALHOST) and its rate limit for MCP raised out of the way
(it stays on, as ours does). The MCP server is registered through its REST API (POST /gateways,
then /servers). Nothing is asserted.
"""

import argparse
import asyncio
import concurrent.futures
import contextlib
import fcntl
import json
import math
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.common

from bench import common
from bench import gateway as gateway_bench
from bench.gateway import ARGS, TOOL, WARMUP, ms_stats, timed, timed_calls

VERSION = "1.1.0"
REQUIREMENTS = [f"mcp-contextforge-gateway=={VERSION}"]
VENV = common.ROOT / "var" / "contextforge"
PYTHON = VENV / "bin" / "python"
ADMIN = "admin@example.com"  # the platform admin it bootstraps (PLATFORM_ADMIN_EMAIL's default)
VARIANTS = {
    "defaults": {},
    "audit": {"AUDIT_TRAIL_ENABLED": "true"},
    "stateful": {"USE_STATEFUL_SESSIONS": "true"},
    # Its audit trail records changes (tools, servers…), not calls; the permission audit
    # writes a row per RBAC check, two per call here.
    "audit-all": {"AUDIT_TRAIL_ENABLED": "true", "PERMISSION_AUDIT_ENABLED": "true"},
}
START_TIMEOUT = 300  # seconds: each start migrates its new database (2 min seen under load)


class PeerFailed(Exception):
    """ContextForge could not be installed, started, configured or called."""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="timed calls per path")
    parser.add_argument("--rounds", type=int, default=10, help="rounds the calls are split in")
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"ContextForge variants, comma-separated, of {', '.join(VARIANTS)} ('' for none)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir (peer logs)")
    args = parser.parse_args(argv)
    args.variants = [v for v in args.variants.split(",") if v]
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants: {', '.join(sorted(unknown))}")
    return args


# --- the peer's virtualenv --------------------------------------------------------------------


def base_python():
    """An interpreter to make the peer's virtualenv with: it requires Python 3.12 or 3.13."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [os.environ.get("CONTEXTFORGE_PYTHON")]
    candidates += [shutil.which("python3.12"), shutil.which("python3.13")]
    candidates += sorted(str(path) for path in pyenv.glob("3.1[23].*/bin/python3"))
    check = "import sys; sys.exit(sys.version_info[:2] not in ((3, 12), (3, 13)))"
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", check], capture_output=True).returncode == 0:
            return candidate  # a pyenv shim without that version fails the check
    raise PeerFailed("ContextForge needs Python 3.12 or 3.13; none found (set CONTEXTFORGE_PYTHON)")


def python():
    """The peer's interpreter, installing it the first time (a marker says it is complete)."""
    marker = VENV / "installed.json"
    VENV.parent.mkdir(exist_ok=True)
    with open(VENV.parent / "contextforge.lock", "w") as lock:  # one install at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists() or json.loads(marker.read_text()) != REQUIREMENTS:
            print(f"installing {' '.join(REQUIREMENTS)} in {VENV} (once)")
            try:
                subprocess.run([base_python(), "-m", "venv", "--clear", str(VENV)], check=True)
                subprocess.run(
                    [str(PYTHON), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
                    + REQUIREMENTS,
                    check=True,
                    timeout=900,
                )
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
                raise PeerFailed(f"installing ContextForge failed: {error}") from None
            marker.write_text(json.dumps(REQUIREMENTS))
    return str(PYTHON)


# --- the peer's processes ---------------------------------------------------------------------


def peer_keys():
    """Fresh secrets for the run, shared by the variants (one token serves them all): its
    settings refuse weak or placeholder ones."""
    names = ("JWT_SECRET_KEY", "AUTH_ENCRYPTION_SECRET")
    names += ("PLATFORM_ADMIN_PASSWORD", "DEFAULT_USER_PASSWORD")
    return {name: secrets.token_urlsafe(32) for name in names}


class Peer:
    """One ContextForge process (a variant), started at once; `wait` until it answers."""

    def __init__(self, variant, workdir, keys):
        from mcplets import serving

        self.variant, self.port = variant, serving.free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"contextforge-{variant}.log"
        inherited = ("PATH", "HOME", "LANG", "TMPDIR")  # not our DATABASE_URL, REDIS_URL, …
        self.env = {name: os.environ[name] for name in inherited if name in os.environ}
        self.env.update(
            keys,
            DATABASE_URL=f"sqlite:///{workdir / f'contextforge-{variant}.db'}",
            SSRF_ALLOW_LOCALHOST="true",  # the MCP server is on 127.0.0.1
            RATE_LIMIT_MEDIUM_RPM="10000000",  # MCP and tools: 100 a minute by default
            RATE_LIMIT_MEDIUM_BURST="10000000",
            PYTHONUNBUFFERED="1",
            **VARIANTS[variant],
        )
        command = [str(VENV / "bin" / "mcpgateway"), "--host", "127.0.0.1"]
        command += ["--port", str(self.port)]
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                command, cwd=workdir, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )

    @property
    def label(self):
        return f"contextforge {self.variant}"

    def wait(self):
        import httpx2

        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PeerFailed(f"{self.label} exited with code {self.process.returncode}")
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(f"{self.base}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.25)
        raise PeerFailed(f"{self.label} did not answer /health in {START_TIMEOUT} s")

    def token(self):
        """A JWT for its admin, minted by its own tool with its settings."""
        command = [PYTHON, "-m", "mcpgateway.utils.create_jwt_token"]
        command += ["--username", ADMIN, "--exp", "600"]  # minutes
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=120)
        if done.returncode != 0 or not done.stdout.strip():
            raise PeerFailed(f"minting a token failed: {done.stderr.strip()[-2000:]}")
        return done.stdout.strip().splitlines()[-1]

    def register(self, url, token):
        """The MCP server at `url` as a ContextForge gateway (it lists the tools at once), and a
        virtual server holding its tool: (that server's MCP URL, the tool's name there)."""
        import httpx2

        def ok(response):
            if response.is_error:
                raise PeerFailed(
                    f"{self.label}: {response.request.method} {response.request.url.path}: "
                    f"{response.status_code} {response.text[:1000]}"
                )
            return response.json()

        headers = {"Authorization": f"Bearer {token}"}
        with httpx2.Client(base_url=self.base, headers=headers, timeout=60) as client:
            body = {"name": "bench-http", "url": url, "transport": "STREAMABLEHTTP"}
            upstream = ok(client.post("/gateways", json=body))
            tools = [
                tool
                for tool in ok(client.get("/tools"))
                if tool.get("gatewayId") == upstream["id"]
                and tool.get("originalName") == TOOL["name"]
            ]
            if not tools:
                raise PeerFailed(f"{self.label} did not list {TOOL['name']} from {url}")
            body = {"server": {"name": "bench-peers", "associated_tools": [tools[0]["id"]]}}
            server = ok(client.post("/servers", json=body))
        return f"{self.base}/servers/{server['id']}/mcp", tools[0]["name"]

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def tail(self, lines=40):
        try:
            text = self.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            text = ["(no log)"]
        return f"--- {self.label}: the last lines of {self.log} ---\n" + "\n".join(text)


def peer_failure(error):
    """The PeerFailed that `error` is or holds (the SDK's task groups wrap what is raised in
    their sessions), or None."""
    while isinstance(error, BaseExceptionGroup):
        group = error.subgroup(PeerFailed)
        if group is None:
            return None
        error = group.exceptions[0]
    return error if isinstance(error, PeerFailed) else None


def tree_cpu(pid):
    """CPU seconds of a process and all its descendants so far (the peer forks helpers)."""
    total, todo = 0.0, [pid]
    while todo:
        pid = todo.pop()
        total += common.cpu_seconds(pid)
        with contextlib.suppress(OSError, ValueError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += map(int, (task / "children").read_text().split())
    return total


# --- measuring --------------------------------------------------------------------------------


async def open_session(stack, url, token=None):
    """An initialized `mcp` client session to `url`, closed with `stack`."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    client = None
    if token:
        headers = {"Authorization": f"Bearer {token}"}
        client = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=60))
    read, write = await stack.enter_async_context(streamable_http_client(url, http_client=client))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session


async def peer_path(stack, peer, url, name, token, expected):
    """A session to the peer's server (closed with `stack`), checked with one call: a function
    timing `n` calls on it."""
    try:
        session = await open_session(stack, url, token)
        answer = await session.call_tool(name, ARGS)
    except Exception as error:  # the SDK's and anyio's, in groups too
        raise PeerFailed(f"{peer.label}: MCP session or call failed: {error!r}") from error
    if answer.is_error or answer.structured_content != expected:
        raise PeerFailed(f"{peer.label} answered {answer}")
    return lambda n: timed_calls(session, n, name)


async def measure(url, agent, targets, args):
    """{label: (durations, CPU seconds of this process, of the peer)} for every path."""
    from mcplet_host import gateway

    def call():
        return gateway.call_tool(agent, "query_crm", ARGS, "model", "bench")

    loop = asyncio.get_running_loop()
    thread = concurrent.futures.ThreadPoolExecutor(1, "bench-gateway")
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(thread.shutdown)
        direct = await open_session(stack, url)
        paths = {
            "direct": (lambda n: timed_calls(direct, n), None),
            "gateway": (lambda n: loop.run_in_executor(thread, timed, call, n), None),
        }
        expected = (await direct.call_tool("query_crm", ARGS)).structured_content
        outcome = await loop.run_in_executor(thread, call)
        if outcome.status != "executed" or outcome.is_error:
            print(f"  WARNING: the gateway answered {outcome.envelope}", file=sys.stderr)
        for peer, target in targets.items():
            paths[peer.label] = (await peer_path(stack, peer, *target, expected), peer)
        for run, _ in paths.values():
            await run(WARMUP)
        per_round = math.ceil(args.calls / args.rounds)
        print(f"  {args.rounds} rounds of {per_round} calls per path, the order rotating")
        results = {label: ([], 0.0, 0.0) for label in paths}
        labels = list(paths)
        for index in range(args.rounds):
            shift = index % len(labels)
            for label in labels[shift:] + labels[:shift]:
                run, peer = paths[label]
                pid = peer.process.pid if peer else None
                ours, theirs = common.cpu_seconds(), tree_cpu(pid) if pid else 0.0
                seconds = await run(per_round)
                durations, cpu_ours, cpu_theirs = results[label]
                cpu_ours += common.cpu_seconds() - ours
                cpu_theirs += (tree_cpu(pid) - theirs) if pid else 0.0
                results[label] = (durations + seconds, cpu_ours, cpu_theirs)
    return results


def report(results, calls_per_path):
    direct = ms_stats(results["direct"][0])["median"]
    print(
        f"\n  {'path':<24}{'median':>9}{'p95':>9}{'mean':>9}{'calls/s':>9}"
        f"{'+ms':>9}{'ratio':>7}   CPU ms/call: ours + peer's"
    )
    for label, (seconds, cpu_ours, cpu_theirs) in results.items():
        f = ms_stats(seconds)
        ours, theirs = cpu_ours * 1000 / len(seconds), cpu_theirs * 1000 / len(seconds)
        peer = f" + {theirs:.2f}" if label.startswith("contextforge") else ""
        print(
            f"  {label:<24}{f['median']:9.3f}{f['p95']:9.3f}{f['mean']:9.3f}{f['rate']:9.0f}"
            f"{f['median'] - direct:+9.3f}{f['median'] / direct:7.2f}   {ours:.2f}{peer}"
        )
    print(f"  (ms; {calls_per_path} calls per path; +ms and ratio: the median against direct's)")


def machine():
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    return f"{os.cpu_count()} CPUs, load average {load}"


# --- the run ----------------------------------------------------------------------------------


def start_peers(variants, workdir, stack, url, peers):
    """The variants' processes started side by side (added to `peers`, stopped with `stack`),
    answering, the server registered with each: {peer: (its MCP URL, the tool's name, a
    token)}. PeerFailed when any fails."""
    if not variants:
        return {}
    python()
    keys = peer_keys()
    for variant in variants:
        peers.append(Peer(variant, workdir, keys))
        stack.callback(peers[-1].stop)
    started = time.monotonic()
    for peer in peers:
        peer.wait()
    took = time.monotonic() - started
    print(f"  ContextForge {VERSION}: {', '.join(variants)} up in {took:.1f} s")
    token = peers[0].token()
    return {peer: (*peer.register(url, token), token) for peer in peers}


def main(argv=None):
    args = parse_args(argv)
    from mcplets.examples.programmable import serve_http, write_spec

    with common.scratch("mcplet-bench-peers-", keep=args.keep) as workdir:
        gateway_bench.setup_database(workdir)
        print(f"machine at the start: {machine()}")
        from pools.sessions import sessions

        peers = []
        with contextlib.ExitStack() as stack:
            url = stack.enter_context(serve_http(write_spec(workdir / "tools.json", [TOOL])))
            stack.callback(sessions.close_all)
            print(f"\n== one read tool over streamable HTTP, {args.calls} calls per path ==")
            agent = gateway_bench.register_server(url)
            try:
                targets = start_peers(args.variants, workdir, stack, url, peers)
                results = asyncio.run(measure(url, agent, targets, args))
            except Exception as error:
                failure = peer_failure(error)
                if failure is None:
                    raise
                for peer in peers:
                    print(peer.tail(), file=sys.stderr)
                print(f"\nbench/peers.py: ContextForge failed: {failure}", file=sys.stderr)
                sys.exit(1)
        report(results, args.rounds * math.ceil(args.calls / args.rounds))
        print(f"machine at the end: {machine()}")


if __name__ == "__main__":
    main()
