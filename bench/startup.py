"""Start-up benchmark: how long `manage.py check` and `manage.py --help` take, and why.

    SECRET_KEY=bench .venv/bin/python bench/startup.py [--runs 7] [--top 15]

Each command runs `--runs` times in a fresh interpreter (what an operator waits for at the
prompt), beside `python -c pass` (the interpreter alone) as the floor; it prints the median and
the minimum of each. Then `manage.py check` runs once more under `python -X importtime`, and the
slowest imports are listed where they enter: each third-party module imported by the project's
own code (or at the top, by Django's start-up), with its cumulative time and its importer, so a
heavy library loaded at start-up shows with the module to make lazy. Nothing is asserted.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for bench.common

from bench import common

COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "manage.py check": ["manage.py", "check"],
    "manage.py --help": ["manage.py", "--help"],
}
FIRST_PARTY = {"a2a", "agents", "dashboard", "mcplet_host", "mcplets", "passkey", "pools"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per command (default 7)")
    parser.add_argument("--top", type=int, default=15, help="imports listed (default 15)")
    return parser.parse_args(argv)


def environment():
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "mcplet_host.settings")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(common.ROOT), env.get("PYTHONPATH")]))
    return env


def run(args, env, flags=()):
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *flags, *args], cwd=common.ROOT, env=env, capture_output=True, text=True
    )
    elapsed = time.perf_counter() - start
    if done.returncode:
        common.refuse(f"{' '.join(args)} failed:\n{done.stderr.strip()}")
    return elapsed, done.stderr


def parse_importtime(text):
    """(depth, module, cumulative µs) per line of `-X importtime`, in the order printed:
    a module's imports come before it, one level deeper."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line[len("import time:") :].split("|")
        if not cumulative.strip().isdigit():
            continue  # the header
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        rows.append((depth, name.strip(), int(cumulative)))
    return rows


def entry_points(rows):
    """Third-party modules imported by first-party code or at the top: (µs, module, importer)."""
    importer, waiting = [None] * len(rows), []
    for index, (depth, _, _) in enumerate(rows):
        while waiting and rows[waiting[-1]][0] > depth:  # its imports, printed before it
            importer[waiting.pop()] = index
        waiting.append(index)
    found = []
    for (_, name, cumulative), parent in zip(rows, importer, strict=True):
        by = rows[parent][1] if parent is not None else "(start-up)"
        if name.split(".")[0] not in FIRST_PARTY and (
            parent is None or by.split(".")[0] in FIRST_PARTY
        ):
            found.append((cumulative, name, by))
    return sorted(found, reverse=True)


def main(argv=None):
    options = parse_args(argv)
    env = environment()
    print(f"{options.runs} runs each, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    for label, args in COMMANDS.items():
        run(args, env)  # warm the file cache and the .pyc files
        seconds = [run(args, env)[0] for _ in range(options.runs)]
        figures = common.stats(seconds)
        print(f"  {label:<18} median {figures['median']:6.3f} s   min {figures['min']:6.3f} s")

    _, stderr = run(COMMANDS["manage.py check"], env, flags=["-X", "importtime"])
    rows = parse_importtime(stderr)
    total = sum(cumulative for depth, _, cumulative in rows if depth == 0)
    print(f"\nmanage.py check imports {len(rows)} modules in {total / 1e6:.3f} s; the slowest")
    print("third-party imports, where the project (or Django's start-up) brings them in:")
    for cumulative, name, importer in entry_points(rows)[: options.top]:
        print(f"  {cumulative / 1000:8.1f} ms  {name:<40} {importer}")


if __name__ == "__main__":
    main()
