"""Our end of bench/langgraph_chain.py, for bench/chain.py: LangGraph's own virtualenv under
var/ (made from the package registry on first use, with the pins below, and again when they
change), and the script running in it, on a database of its own on our PostgreSQL server."""

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

from bench import common
from tests.processes import stop

LANGGRAPH_VENV = common.ROOT / "var" / "langgraph"
LANGGRAPH_PINS = [
    "langgraph==1.2.24",
    "langgraph-checkpoint-postgres==3.2.0",
    "psycopg[binary]==3.3.9",
    "psycopg-pool==3.3.3",
]


def langgraph_python():
    """The interpreter of var/langgraph, made (again) when its pins are not the ones above."""
    python, marker = LANGGRAPH_VENV / "bin" / "python", LANGGRAPH_VENV / "pins.json"
    LANGGRAPH_VENV.parent.mkdir(exist_ok=True)
    with open(LANGGRAPH_VENV.parent / "langgraph.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists() and json.loads(marker.read_text()) == LANGGRAPH_PINS:
            return python
        print(f"installing {', '.join(LANGGRAPH_PINS)} into {LANGGRAPH_VENV} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(LANGGRAPH_VENV)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        done = subprocess.run(pip + LANGGRAPH_PINS, capture_output=True, text=True, timeout=900)
        if done.returncode:
            raise RuntimeError(f"pip failed ({done.returncode}):\n{done.stderr[-3000:]}")
        marker.write_text(json.dumps(LANGGRAPH_PINS))
    return python


class LangGraph:
    """bench/langgraph_chain.py running in LangGraph's virtualenv (-I: none of our paths), on a
    database of its own on the same server: `self(op, n)` runs n chains of a phase there."""

    def __init__(self, args):
        url = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + args.langgraph_database
        common.ensure_postgres_database(url)
        settings = {"dsn": url, "concurrency": args.concurrency, "durability": args.durability}
        script = str(Path(__file__).with_name("langgraph_chain.py"))
        command = [str(langgraph_python()), "-I", script, json.dumps(settings)]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.durability = self.read()["durability"]

    def read(self):
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the LangGraph side exited ({self.process.wait()})")
        return json.loads(line)

    def __call__(self, op, n):
        self.process.stdin.write(json.dumps({"op": op, "n": n}) + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self):
        self.process.stdin.close()
        stop(self.process)
