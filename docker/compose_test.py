"""`make compose-test`: the project's docker-compose.yml, unmodified, on a real Docker engine,
checked as a user would — then stopped, started again on the same volumes, checked again, scaled
out (`up --scale worker=2`, the web at MCPLET_WEB_PROCESSES=3: each worker takes work, each web
process serves) and removed with its volumes. Prints the build and start times, the image size
and every check.

Stand-ins (docker/standins) replace the public images only when those cannot be pulled; the
stack runs as its own compose project on free loopback ports, so it disturbs nothing else.
Standard library only: it drives the `docker compose` CLI and speaks HTTP to the web service.
"""

import concurrent.futures
import http.cookiejar
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "mcplet-compose-test"
PUBLIC_IMAGES = ["python:3.11-slim", "postgres:16", "redis:7", "axllent/mailpit:latest"]
STANDINS = ROOT / "docker" / "standins"
DIRECTOR = "director"
METRICS_TOKEN = secrets.token_urlsafe(24)
ONE_SHOT = ("migrate", "admin", "seed")
LONG_RUNNING = ("postgres", "redis", "mailpit", "web", "worker", "beat", "watcher", "mcplets")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sh(*command, check=True, timeout=900):
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise SystemExit(
            f"FAILED: {' '.join(command)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


def pullable(image):
    if sh("docker", "image", "inspect", image, check=False).returncode == 0:
        return True
    return sh("docker", "pull", "-q", image, check=False, timeout=120).returncode == 0


class Stack:
    def __init__(self, files, env):
        # The compose defaults: neither the caller's environment nor an .env of theirs.
        self.base = ["docker", "compose", "-p", PROJECT, "--project-directory", str(ROOT)]
        self.base += ["--env-file", os.devnull]
        for file in files:
            self.base += ["-f", str(file)]
        settings = set(re.findall(r"\$\{(\w+)", (ROOT / "docker-compose.yml").read_text()))
        self.env = {k: v for k, v in os.environ.items() if k not in settings} | env

    def run(self, *args, check=True, timeout=900):
        result = subprocess.run(
            self.base + list(args),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
        )
        if check and result.returncode != 0:
            print(self.run("logs", "--tail", "40", check=False).stdout[-8000:])
            raise SystemExit(
                f"FAILED: docker compose {' '.join(args)}\n{result.stdout[-3000:]}\n"
                f"{result.stderr[-3000:]}"
            )
        return result

    def manage(self, *args):
        return self.run("exec", "-T", "web", "python", "manage.py", *args).stdout

    def shell(self, code):
        return json.loads(self.manage("shell", "-c", code).strip().splitlines()[-1])

    def containers(self, service=None):
        out = self.run("ps", "-a", "--format", "json").stdout
        rows = [json.loads(line) for line in out.splitlines() if line.strip()]
        if len(rows) == 1 and isinstance(rows[0], list):
            rows = rows[0]
        return [row for row in rows if service in (None, row["Service"])]

    def states(self):
        """One row per service (the last container of a scaled one)."""
        return {row["Service"]: row for row in self.containers()}


def wait(what, predicate, timeout):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if value := predicate():
                return value
        except (OSError, ValueError, KeyError, SystemExit) as exc:
            last = exc
        time.sleep(2)
    raise SystemExit(f"FAILED: timed out after {timeout}s waiting for {what} (last: {last})")


CHECKS = []


def check(name, detail=""):
    CHECKS.append(name)
    print(f"  ok  {name}{': ' + detail if detail else ''}", flush=True)


def up_and_healthy(stack, port):
    started = time.monotonic()
    stack.run("up", "-d")

    def settled():
        states = stack.states()
        for service in ONE_SHOT:
            row = states.get(service, {})
            if row.get("State") == "exited" and row.get("ExitCode") != 0:
                logs = stack.run("logs", service, check=False).stdout[-3000:]
                raise SystemExit(f"FAILED: {service} exited with {row['ExitCode']}\n{logs}")
        done = all(states.get(s, {}).get("State") == "exited" for s in ONE_SHOT)
        healthy = all(states.get(s, {}).get("Health") == "healthy" for s in LONG_RUNNING)
        return done and healthy

    wait("every one-shot service to finish and every other to be healthy", settled, 300)
    elapsed = time.monotonic() - started
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as response:
        body = json.loads(response.read())
        assert response.status == 200 and body["status"] == "up", body
    check(
        "stack up",
        f"{elapsed:.0f} s to migrate, admin, seed done and {len(LONG_RUNNING)} services "
        "healthy; /healthz 200",
    )
    return elapsed


def one_image(stack, built):
    app = [s for s in stack.states() if s not in ("postgres", "redis", "mailpit")]
    ids = {
        sh("docker", "inspect", "-f", "{{.Image}}", row["ID"]).stdout.strip()
        for row in stack.states().values()
        if row["Service"] in app
    }
    if ids != {built}:
        raise SystemExit(f"FAILED: the app services run {ids}, not the one image built {built}")
    check("one image", f"{len(app)} services ({', '.join(sorted(app))}) run the image built once")


def admin_password(stack):
    logs = stack.run("logs", "--no-log-prefix", "admin").stdout
    match = re.search(r"username: (\S+)\s+password: (\S+)", logs)
    if not match:
        raise SystemExit(f"FAILED: no administrator account in the admin service's log:\n{logs}")
    return match.group(1), match.group(2)


def admin_login(port, username, password):
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    login = f"http://127.0.0.1:{port}/admin/login/?next=/admin/"
    page = opener.open(login, timeout=10).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    form = {"csrfmiddlewaretoken": token, "username": username, "password": password}
    response = opener.open(login, data=urllib.parse.urlencode(form).encode(), timeout=10)
    body = response.read().decode()
    if not response.url.endswith("/admin/") or "Log out" not in body:
        raise SystemExit(f"FAILED: admin login as {username} did not reach /admin/")
    check("admin login", f"{username} signs in at /admin/ with the password the admin log shows")


MCPLETS = """import json
from pools.models import Mcplet
accepted = Mcplet.objects.filter(status="accepted")
print(json.dumps(sorted(accepted.values_list("name", flat=True))))"""

RUNS = """import json
from agents.models import AgentRun
from held.models import Ceremony
runs = {r.agent.agent_id: r.status for r in AgentRun.objects.select_related("agent")}
plans = Ceremony.objects.filter(kind="result", status="pending")
held = list(plans.values_list("agent_id", flat=True))
print(json.dumps({"runs": runs, "held": held}))"""


def reference_mcplets(stack):
    names = wait(
        "the watcher to discover the eight reference MCPlets",
        lambda: (names := stack.shell(MCPLETS)) and len(names) >= 8 and names,
        180,
    )
    check("reference MCPlets discovered", f"{len(names)} accepted: {', '.join(names)}")


def director_to_plan(stack):
    started = time.monotonic()
    out = stack.manage("run_director", DIRECTOR).strip()
    state = wait(
        "the runs to reach the plan held for approval",
        lambda: (s := stack.shell(RUNS)) and "planning-agent" in s["held"] and s,
        300,
    )
    assert state["runs"].get("info-gathering-agent") == "success", state
    assert state["runs"].get("planning-agent") == "awaiting_approval", state
    worker = stack.run("logs", "--no-log-prefix", "worker").stdout
    ran = sorted(set(re.findall(r"Task ([\w.]+)\[[^\]]+\] succeeded", worker)))
    if not ran:
        raise SystemExit(f"FAILED: no task succeeded in the worker container:\n{worker[-3000:]}")
    check("run_director", out)
    check(
        "runs progress in the worker container",
        f"info-gathering-agent success, planning-agent awaiting approval; worker ran {ran}",
    )
    check(
        "plan held for approval",
        f"a pending result ceremony for planning-agent, "
        f"{time.monotonic() - started:.0f} s after run_director",
    )


def metrics_of_every_container(port):
    """One scrape of the web with the token shows what the worker and the watcher counted
    (the shared metrics volume); without it, a 401."""
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        urllib.request.urlopen(url, timeout=30)
        raise SystemExit("FAILED: /metrics answered without the token")
    except urllib.error.HTTPError as refused:
        if refused.code != 401:
            raise SystemExit(f"FAILED: /metrics without a token: {refused.code}, not 401") from None
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (http, the stack)
        text = response.read().decode()
    wanted = {
        "worker": 'mcplet_agent_runs_finished_total{state="success"}',
        "watcher": 'mcplet_discovery_verdicts_total{server="',
        "database": 'mcplet_approvals_pending{kind="result"} 1.0',
    }
    missing = [f"{who}: {series}" for who, series in wanted.items() if series not in text]
    if missing:
        raise SystemExit(f"FAILED: /metrics lacks {missing}:\n{text[-3000:]}")
    check("metrics", "/metrics 401 without the token; with it, the worker's and watcher's series")


def audit_intact(stack):
    out = stack.manage("verify_audit").strip()
    check("verify_audit", out.splitlines()[-1] if out else "")


# The uvicorn workers of the web container (children of its PID 1, uvicorn's supervisor, started
# by multiprocessing's spawn) and their CPU ticks so far.
WEB_WORKERS = """import json, os
rows = {}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        cmdline = open(f"/proc/{pid}/cmdline").read()
    except OSError:
        continue
    if stat[1] == "1" and "spawn_main" in cmdline:
        rows[pid] = int(stat[11]) + int(stat[12])
print(json.dumps(rows))"""

PLANS_HELD = """import json
from held.models import Ceremony
plans = Ceremony.objects.filter(kind="result", status="pending", agent_id="planning-agent")
print(json.dumps(plans.count()))"""


def web_processes(stack, port, expected, requests=400):
    """MCPLET_WEB_PROCESSES=expected: that many uvicorn workers, and each one serves: its CPU
    grows while /healthz is asked `requests` times, 8 at once."""

    def workers():
        out = stack.run("exec", "-T", "web", "python", "-c", WEB_WORKERS).stdout
        return json.loads(out.strip().splitlines()[-1])

    def get(_):
        url = f"http://127.0.0.1:{port}/healthz"
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status

    before = workers()
    if len(before) != expected:
        raise SystemExit(f"FAILED: {len(before)} uvicorn workers in web, not {expected}: {before}")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        statuses = set(pool.map(get, range(requests)))
    after = workers()
    grew = {pid: after.get(pid, 0) - ticks for pid, ticks in before.items()}
    if statuses != {200} or set(after) != set(before) or min(grew.values()) < 3:
        raise SystemExit(
            f"FAILED: not every web worker served: answers {statuses}, workers before {before}, "
            f"after {after}"
        )
    check(
        f"web serves with {expected} processes",
        f"MCPLET_WEB_PROCESSES={expected}: uvicorn workers {', '.join(sorted(before, key=int))}; "
        f"CPU ticks each spent on {requests} /healthz requests: {sorted(grew.values())}",
    )


def healthy(stack, service, count):
    rows = stack.containers(service)
    return len(rows) == count and all(row.get("Health") == "healthy" for row in rows) and rows


def succeeded(container):
    logs = sh("docker", "logs", container, check=False)
    return len(re.findall(r"Task [\w.]+\[[^\]]+\] succeeded", logs.stdout + logs.stderr))


def scaled(stack, port):
    """`up --scale worker=2` (and the web recreated with MCPLET_WEB_PROCESSES=3): both workers
    answer the broker's ping, and each alone runs a Director's workflow to the plan held while
    the other is stopped."""
    stack.env["MCPLET_WEB_PROCESSES"] = "3"
    started = time.monotonic()
    stack.run("up", "-d", "--no-deps", "--scale", "worker=2", "worker", "web")
    workers = wait("two healthy worker containers", lambda: healthy(stack, "worker", 2), 240)
    wait("the web healthy again", lambda: healthy(stack, "web", 1), 240)
    ping = ["celery", "-A", "mcplet_host", "inspect", "ping", "--timeout", "10"]
    ping = stack.run("exec", "-T", "worker", *ping).stdout
    nodes = sorted(set(re.findall(r"->\s+(celery@\S+):\s+OK", ping)))
    names = {row["ID"][:12] for row in workers}
    if len(nodes) != 2 or {node.removeprefix("celery@") for node in nodes} != names:
        raise SystemExit(f"FAILED: inspect ping answered {nodes}, not the workers {names}:\n{ping}")
    check(
        "up --scale worker=2",
        f"2 worker containers healthy {time.monotonic() - started:.0f} s later; "
        f"inspect ping: {', '.join(nodes)}",
    )
    web_processes(stack, port, 3)
    for row in workers:
        others = [other["ID"] for other in workers if other is not row]
        sh("docker", "stop", *others)
        try:
            plans, tasks = stack.shell(PLANS_HELD), succeeded(row["ID"])
            began = time.monotonic()
            stack.manage("run_director", DIRECTOR)
            wait(
                f"{row['Name']} alone to take the workflow to the plan held",
                lambda plans=plans: stack.shell(PLANS_HELD) > plans,
                300,
            )
            ran = succeeded(row["ID"]) - tasks
            if not ran:
                raise SystemExit(f"FAILED: {row['Name']} ran no task, yet the plan is held")
        finally:
            sh("docker", "start", *others)
        check(
            f"{row['Name']} takes work",
            f"with the other worker stopped: run_director → plan held in "
            f"{time.monotonic() - began:.0f} s, {ran} tasks succeeded in this container",
        )
        wait("both workers healthy again", lambda: healthy(stack, "worker", 2), 240)


def main():
    print("== compose-test: docker-compose.yml on a real Docker engine", flush=True)
    files = [ROOT / "docker-compose.yml"]
    if all(pullable(image) for image in PUBLIC_IMAGES):
        print("   public images: pulled")
    else:
        print("   public images cannot be pulled here: local stand-ins (docker/standins)")
        started = time.monotonic()
        sh("bash", str(STANDINS / "build.sh"), timeout=1800)
        print(f"   stand-ins ready in {time.monotonic() - started:.0f} s", flush=True)
        files.append(STANDINS / "compose.yml")

    web_port = free_port()
    stack = Stack(
        files,
        {
            "WEB_PORT": str(web_port),
            "MAILPIT_PORT": str(free_port()),
            "METRICS_TOKEN": METRICS_TOKEN,
        },
    )
    stack.run("down", "-v", "--remove-orphans", check=False)  # a run interrupted earlier

    started = time.monotonic()
    stack.run("build", timeout=3600)
    build = time.monotonic() - started
    image = json.loads(sh("docker", "image", "inspect", "mcplet-host").stdout)[0]
    size = image["Size"] / 1e6
    print(f"   build: {build:.0f} s; image mcplet-host {size:.0f} MB", flush=True)
    try:
        first = up_and_healthy(stack, web_port)
        one_image(stack, image["Id"])
        username, password = admin_password(stack)
        admin_login(web_port, username, password)
        web_processes(stack, web_port, 2)  # compose's default
        reference_mcplets(stack)
        director_to_plan(stack)
        metrics_of_every_container(web_port)
        audit_intact(stack)

        print("== down, then up again on the same volumes", flush=True)
        stack.run("down")
        second = up_and_healthy(stack, web_port)
        admin_login(web_port, username, password)
        reference_mcplets(stack)
        audit_intact(stack)

        print("== up --scale worker=2, web with MCPLET_WEB_PROCESSES=3", flush=True)
        scaled(stack, web_port)
        audit_intact(stack)
    except SystemExit:
        print(stack.run("logs", "--tail", "60", check=False).stdout[-20000:])
        raise
    finally:
        stack.run("down", "-v", "--remove-orphans", check=False)
    print(
        f"== compose-test: {len(CHECKS)} checks passed; build {build:.0f} s, first start "
        f"{first:.0f} s, second start {second:.0f} s, image mcplet-host {size:.0f} MB"
    )
    print(f"compose-test: {len(CHECKS)} passed, 0 failed")


if __name__ == "__main__":
    sys.exit(main())
