"""A real Prometheus (Debian's package; `make prometheus`) for tests: it scrapes the host's
`/metrics` with a bearer token every second, and its HTTP API answers instant queries."""

import os
import shutil
import subprocess
from contextlib import contextmanager

import httpx
import pytest
import yaml

from tests.processes import free_port, serve_with_worker, stop, wait_until

TOKEN = "metrics-test-token"
IMPLIED = ("__name__", "instance", "job")  # labels every answer has


def start_prometheus(folder, target):
    """Prometheus scraping `target`'s /metrics every second with the bearer token."""
    (folder / "token").write_text(TOKEN)
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": "mcplet-host",
                "metrics_path": "/metrics",
                "authorization": {"credentials_file": str(folder / "token")},
                "static_configs": [{"targets": [target]}],
            }
        ],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    command = ["prometheus", f"--config.file={folder / 'prometheus.yml'}"]
    command += [f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{port}"]
    log = (folder / "prometheus.log").open("w")
    return subprocess.Popen(command, stdout=log, stderr=log), f"http://127.0.0.1:{port}"


def query(prometheus, promql):
    """{labels as a sorted tuple: value} of an instant query over the HTTP API."""
    answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": promql}, timeout=10).json()
    assert answer["status"] == "success", answer
    return {
        tuple(sorted((k, v) for k, v in r["metric"].items() if k not in IMPLIED)): (
            float(r["value"][1])
        )
        for r in answer["data"]["result"]
    }


def scraped(prometheus, promql, expected, exactly=False):
    """Wait until Prometheus has scraped `expected` ((labels, value) pairs; an empty label is
    no label in Prometheus) — and, `exactly`, no other series."""
    wanted = {
        tuple(sorted((k, v) for k, v in labels.items() if v)): value for labels, value in expected
    }
    found = {}

    def matches():
        nonlocal found
        found = query(prometheus, promql)
        if exactly and found.keys() != wanted.keys():
            return False
        return all(found.get(labels) == value for labels, value in wanted.items())

    try:
        wait_until(matches, f"{promql} to be {wanted}", timeout=30)
    except AssertionError:
        raise AssertionError(f"{promql}: {found}, not {wanted}") from None
    return found


@contextmanager
def scraped_host(folder, env, port=None, processes=2):
    """(web URL, Prometheus URL): `manage.py serve` on `port` with `processes` web processes and
    a Celery worker, `env` and one metrics directory for all of them, and Prometheus scraping
    the web."""
    if not shutil.which("prometheus"):
        missing = "needs Debian's prometheus (`make prometheus` installs it)"
        if os.environ.get("CI"):  # CI runs every test: a missing server fails the run
            pytest.fail(missing)
        pytest.skip(missing)
    port = port or free_port()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(folder / "metrics"), "METRICS_TOKEN": TOKEN, **env}
    prometheus, prometheus_url = start_prometheus(folder, f"127.0.0.1:{port}")
    try:
        with serve_with_worker(
            folder, env, processes=processes, port=port, logs=["prometheus.log"]
        ) as web:
            wait_until(
                lambda: query(prometheus_url, "up") == {(): 1.0},
                "Prometheus to scrape the web",
                prometheus,
            )
            yield web, prometheus_url
    finally:
        stop(prometheus)
