"""Real host processes for tests: a Celery worker and `manage.py` commands on the test database."""

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def environment(**extra):
    """The test's own settings for a child process: same Redis, same (test) database."""
    db = connection.settings_dict
    url = f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"
    return {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1", **extra}


def manage(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextmanager
def celery_worker(log_path, name="worker", concurrency=2, **env):
    """A real worker process (threads pool) consuming from the real broker."""
    command = [sys.executable, "-m", "celery", "-A", "mcplet_host", "worker"]
    command += ["-P", "threads", "-c", str(concurrency), "-n", f"{name}@%h"]
    command += ["--without-mingle", "--without-gossip", "--loglevel", "INFO"]
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command, cwd=ROOT, env=environment(**env), stdout=log, stderr=log
        )
    try:
        wait_until(lambda: "ready." in Path(log_path).read_text(), f"{name} to start", process)
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()


def wait_until(predicate, what, process=None, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process exited ({process.returncode}) before {what}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
