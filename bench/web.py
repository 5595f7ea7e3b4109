"""The host's web tier for the benchmarks that load it (`a2a_endpoint.py`, `load.py`): its
command with N processes (`manage.py serve`, uvicorn) or daphne's single process as before, the
application they load (`bench.web_asgi`, which applies the benchmark's settings in each
process), and the CPU of a server with all its processes. No Django at import."""

import contextlib
import subprocess
import sys
import time
from pathlib import Path

from bench import common
from tests.processes import free_port, stop

# Read by bench.web_asgi in each server process, at import.
QUEUE_ENV = "MCPLET_BENCH_A2A_QUEUE"
CONN_ENV = "MCPLET_BENCH_A2A_CONN_MAX_AGE"
PROFILE_ENV = "MCPLET_BENCH_A2A_PROFILE"
BROADCAST_ENV = "MCPLET_BENCH_A2A_BROADCAST"
ASGI_APP = "bench.web_asgi:application"
HOST_APP = "mcplet_host.asgi:application"
DAPHNE = "daphne"  # a "processes" value: daphne, one process


def command(port, processes, app=ASGI_APP):
    """The server's command line: `manage.py serve` with `processes` uvicorn workers, or daphne
    (one process, what compose ran before `serve`)."""
    if processes == DAPHNE:
        return [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "-v", "0", app]
    return [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(port)] + [
        "--processes", str(processes), "--app", app,
    ]  # fmt: skip


def describe(processes):
    if processes == DAPHNE:
        return "daphne, one process"
    return f"manage.py serve (uvicorn), {processes} process{'es' if processes > 1 else ''}"


def parse_processes(text):
    """ "1,2" → [1, 2]; "daphne" stands for daphne's one process."""
    return [DAPHNE if part == DAPHNE else int(part) for part in text.split(",") if part]


def labelled(counts):
    """(label, count) for each count in turn: the count, then "<count>#2" when it repeats."""
    seen = {}
    for count in counts:
        seen[count] = seen.get(count, 0) + 1
        yield (str(count) if seen[count] == 1 else f"{count}#{seen[count]}"), count


def tree(pid):
    """`pid` and all its descendants (from /proc)."""
    children = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        found.append(current := todo.pop())
        todo.extend(children.get(current, ()))
    return found


def tree_cpu_seconds(pid):
    """CPU (user + system) of a server so far: the process and its children (uvicorn's
    supervisor and its workers). A child that ended meanwhile is not counted."""
    return sum(c for p in tree(pid) if (c := common.cpu_seconds(p)) == c)  # NaN: gone


def tree_rss_mb(pid):
    total = 0.0
    for p in tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
    return total


def machine_busy():
    """(busy, total) CPU ticks of the whole machine so far, all CPUs (/proc/stat): how close
    to saturated the machine was over a phase, whoever used it."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def log_tail(path, what):
    tail = Path(path).read_text(errors="replace")[-3000:]
    print(f"--- {what} log ({path}), last lines ---\n{tail}", file=sys.stderr)


@contextlib.contextmanager
def server(env, log_path, processes=1, timeout=90):
    """The server on a free port, up when /healthz answers 200 and each of its processes has
    loaded the application; yields (base URL, the server's process)."""
    import httpx

    port = free_port()
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command(port, processes), cwd=common.ROOT, env=env, stdout=log, stderr=log
        )
    url, workers = f"http://127.0.0.1:{port}", 1 if processes == DAPHNE else processes
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited ({process.returncode}) before it was up")
            loaded = processes == DAPHNE or (
                Path(log_path).read_text(errors="replace").count("Started server process")
                >= workers
            )
            with contextlib.suppress(httpx.TransportError):
                health = httpx.get(f"{url}/healthz", timeout=5)
                if health.status_code != 200:
                    raise RuntimeError(f"/healthz answered {health.status_code}: {health.text}")
                if loaded:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server was not up after {timeout} s")
            time.sleep(0.2)
        yield url, process
    except BaseException:
        log_tail(log_path, "server")
        raise
    finally:
        stop(process, 20)


def profiles(path):
    """The stats files a profiled server wrote, one per process (`<path>.<pid>`)."""
    return sorted(Path(path).parent.glob(f"{Path(path).name}.*"))


def print_scaling(by_processes):
    """Each kind's req/s and server CPU per request by process count, and the ratio of each
    count to the first (req/s; CPU per request)."""
    if len(by_processes) < 2:
        return
    counts = list(by_processes)
    first = by_processes[counts[0]]
    print(
        "\nBy web processes: req/s, server CPU ms per request (all the server's processes), "
        "machine busy % (all CPUs)"
    )
    head = f"  {'kind':<18}" + "".join(f" {str(c):>21}" for c in counts)
    head += "".join(f" {f'{c}/{counts[0]}':>14}" for c in counts[1:])
    print(head + "   (ratios: req/s; CPU)")
    for name in first:
        row = f"  {name:<18}"
        for c in counts:
            r = by_processes[c].get(name)
            row += (
                f" {r['rps']:>8.1f} {r['server_cpu_ms']:>7.2f} {r['machine_busy']:>4.0%}"
                if r
                else f" {'-':>21}"
            )
        for c in counts[1:]:
            r = by_processes[c].get(name)
            base = first[name]
            if r is None:
                row += f" {'-':>14}"
                continue
            cpu = r["server_cpu_ms"] / base["server_cpu_ms"]
            row += f" {r['rps'] / base['rps']:>6.2f} {cpu:>7.2f}"
        print(row)
