"""Real host processes for tests: daphne, a Celery worker and `manage.py` commands on the test
database."""

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def environment(**extra):
    """The test's own settings for a child process: same Redis, same (test) database."""
    db = connection.settings_dict
    url = f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"
    return {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1", **extra}


def manage(*args, timeout=120, **env):
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environment(**env),
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
        stop(process)


def stop(process, seconds=15):
    """Terminate a child process, killing it if it does not exit in time."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def daphne(log_path, port=None, **env):
    """daphne serving the project's ASGI application (pages and websocket), as `web` does;
    yields its base URL on localhost, an allowed host and so an allowed Origin."""
    port = port or free_port()
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [*command, "mcplet_host.asgi:application"],
            cwd=ROOT,
            env=environment(**env),
            stdout=log,
            stderr=log,
        )

    def listening():
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_until(listening, "daphne to listen", process)
        yield f"http://localhost:{port}"
    finally:
        stop(process)


def wait_until(predicate, what, process=None, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process exited ({process.returncode}) before {what}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    return tmp_path_factory.mktemp("scripts")


@pytest.fixture
def script(scripts, settings):
    """As tests/conftest.py's, in a folder the host processes know from the start."""
    import yaml

    settings.MCPLET_SCRIPT_DIRS = [str(scripts)]

    def write(agents, name="test"):
        (scripts / f"{name}.yaml").write_text(yaml.safe_dump({"agents": agents}))
        return f"scripted/{name}"

    return write


@contextmanager
def serve_with_worker(folder, env, processes=2, logs=(), port=None):
    """`manage.py serve --processes N` and a Celery worker, both with `env`, on the test
    database; yields the web's URL once every web process started. On a failure the ends of
    their logs (and of `logs`, other files in `folder`) are printed."""
    port = port or free_port()
    log = (folder / "serve.log").open("w")
    web = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port), "--processes", str(processes)],
        cwd=ROOT,
        env=environment(**env),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        with celery_worker(folder / "worker.log", **env):
            wait_until(
                lambda: (
                    (folder / "serve.log").read_text().count("Started server process") == processes
                ),
                "the web processes to start",
                web,
            )
            yield f"http://localhost:{port}"
    except BaseException:
        for name in ("serve.log", "worker.log", *logs):
            print(name, (folder / name).read_text()[-3000:])
        raise
    finally:
        stop(web)


@contextmanager
def signed_in(web, user):
    """An HTTP client of the host at `web`, signed in as `user` (a session of the test's making)
    and sending the CSRF token with its requests, as the host's own pages do."""
    import httpx
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    session = {settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value}
    with httpx.Client(base_url=web, cookies=session, timeout=60) as browser:
        browser.get("/dashboard/control/").raise_for_status()  # a page with forms: CSRF cookie
        browser.headers["X-CSRFToken"] = browser.cookies[settings.CSRF_COOKIE_NAME]
        yield browser
