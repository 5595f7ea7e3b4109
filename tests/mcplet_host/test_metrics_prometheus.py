"""A real Prometheus (Debian's package; `make prometheus`) scrapes `manage.py serve`'s two web
processes while a Celery worker runs a partner's tasks: every process counts into one
PROMETHEUS_MULTIPROC_DIR, one bearer-token scrape of the web reads them all, and the queries
over Prometheus's HTTP API find what happened — the partner's requests (web), the tool calls,
their durations and the refusal (worker), a held call pending, then rejected by a person in
admin (web), and the runs as they ended (worker)."""

import json
import os
import re
import shutil
import subprocess
import time
from urllib.parse import quote

import httpx
import pytest
import yaml
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from playwright.sync_api import expect

from a2a import messages
from a2a.models import PartnerKey
from agents.models import AgentRun
from held.models import Ceremony
from tests.browser import screenshot
from tests.processes import (
    ROOT,
    free_port,
    script,  # noqa: F401 (a fixture)
    scripts,  # noqa: F401 (a fixture)
    serve_with_worker,
    stop,
    wait_until,
)

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

TOKEN = "metrics-test-token"
IMPLIED = ("__name__", "instance", "job")  # labels every answer has
SEND = {"tool": "send_email", "arguments": {"to": ["sato@example.jp"], "body": "Hi"}}


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


def scraped(prometheus, promql, expected):
    """Wait until Prometheus has scraped `expected` ((labels, value) pairs; an empty label is
    no label in Prometheus)."""
    wanted = {
        tuple(sorted((k, v) for k, v in labels.items() if v)): value for labels, value in expected
    }
    found = {}

    def matches():
        nonlocal found
        found = query(prometheus, promql)
        return all(found.get(labels) == value for labels, value in wanted.items())

    try:
        wait_until(matches, f"{promql} to be {wanted}", timeout=30)
    except AssertionError:
        raise AssertionError(f"{promql}: {found}, not {wanted}") from None


@pytest.fixture
def host(tmp_path, scripts):  # noqa: F811
    """(web URL, Prometheus URL): `serve` with two processes and a worker, one metrics
    directory, and Prometheus scraping the web."""
    if not shutil.which("prometheus"):
        missing = "needs Debian's prometheus (`make prometheus` installs it)"
        if os.environ.get("CI"):  # CI runs every test: a missing server fails the run
            pytest.fail(missing)
        pytest.skip(missing)
    port = free_port()
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "METRICS_TOKEN": TOKEN,
        "MCPLET_SCRIPT_DIRS": str(scripts),
    }
    prometheus, prometheus_url = start_prometheus(tmp_path, f"127.0.0.1:{port}")
    try:
        with serve_with_worker(tmp_path, env, port=port, logs=["prometheus.log"]) as web:
            wait_until(
                lambda: query(prometheus_url, "up") == {(): 1.0},
                "Prometheus to scrape the web",
                prometheus,
            )
            yield web, prometheus_url
    finally:
        stop(prometheus)


def admin_reject(web, ceremony):
    """An operator rejects the held call with admin's action, over HTTP to the web."""
    staff = get_user_model().objects.create_superuser("operator", "op@example.org", "pw-op-1")
    client = Client()
    client.force_login(staff)
    cookies = {settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value}
    with httpx.Client(base_url=web, cookies=cookies, timeout=30) as browser:
        page = browser.get("/admin/held/ceremony/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        done = browser.post(
            "/admin/held/ceremony/",
            data={
                "action": "reject",
                "_selected_action": str(ceremony.pk),
                "index": "0",
                "csrfmiddlewaretoken": csrf,
            },
        )
        assert done.status_code == 302, done.text[-2000:]


def test_prometheus_scrapes_the_web_and_worker_figures(host, registry, script, calls, page):  # noqa: F811
    web, prometheus = host
    partner = registry["partner"]
    partner.callable_agents.set([registry["info"], registry["dispatch"]])
    partner.accessible_pools.set([registry["info-pool"], registry["media-pool"]])
    registry["info"].model = script(
        {
            "info-gathering-agent": [
                {
                    "tool_calls": [
                        {"name": "query_crm", "arguments": {"filter": "rain"}},
                        {"name": "fetch_web_content", "arguments": {"url": "https://w.example"}},
                        {"name": "drop_database", "arguments": {}},
                    ]
                },
                {"json": {"analysis": "rain tomorrow"}},
            ],
            "dispatch-agent": [{"json": {"actions": [SEND]}}],
        }
    )
    registry["info"].save()
    registry["dispatch"].model = registry["info"].model
    registry["dispatch"].save()
    _, key = PartnerKey.issue(partner, "metrics")
    started = time.monotonic()
    with httpx.Client(base_url=web, headers={"Authorization": f"Bearer {key}"}) as api:
        for recipient in ("info-gathering-agent", "dispatch-agent"):
            body = messages.task_request("partner-bot", recipient, {"store": "shinjuku"})
            assert api.post("/a2a/tasks", json=body, timeout=60).status_code in (200, 202)
        assert api.get("/a2a/agents").status_code == 200
        wait_until(
            lambda: (
                AgentRun.objects.filter(status__in=AgentRun.FINAL).count() == 1
                and Ceremony.objects.pending().exists()
            ),
            "the information run to end and the dispatch run to wait",
        )
    assert len(calls("query_crm")) == len(calls("fetch_web_content")) == 1

    scraped(prometheus, "mcplet_approvals_pending", [({"kind": "tool_call"}, 1)])
    scraped(prometheus, "mcplet_agent_runs", [({"state": "awaiting_approval"}, 1)])
    admin_reject(web, Ceremony.objects.pending().get())
    wait_until(lambda: AgentRun.objects.filter(status="cancelled").exists(), "the run to end")

    scraped(
        prometheus,
        "mcplet_tool_calls_total",
        [
            ({"tool": "query_crm", "pool": "", "outcome": "success"}, 1),
            ({"tool": "fetch_web_content", "pool": "info-pool", "outcome": "success"}, 1),
            ({"tool": "", "pool": "", "outcome": "refused"}, 1),
            ({"tool": "send_email", "pool": "media-pool", "outcome": "held"}, 1),
        ],
    )
    scraped(prometheus, "mcplet_gateway_refusals_total", [({"rule": "routable"}, 1)])
    scraped(
        prometheus,
        'mcp_client_operation_duration_seconds_count{mcp_method_name="tools/call"}',
        [
            (
                {
                    "mcp_method_name": "tools/call",
                    "gen_ai_tool_name": tool,
                    "server": "reference",
                    "error_type": "",
                },
                1,
            )
            for tool in ("query_crm", "fetch_web_content")
        ],
    )
    # Each call took less than the whole test, and more than nothing.
    took = query(prometheus, "sum(mcp_client_operation_duration_seconds_sum)")[()]
    assert 0 < took < time.monotonic() - started
    # A task that ends while the request waits is a 200, one still going a 202.
    scraped(
        prometheus,
        'sum by (view, method) (mcplet_partner_requests_total{status=~"20[02]"})',
        [
            ({"view": "TaskList", "method": "POST"}, 2),
            ({"view": "AgentList", "method": "GET"}, 1),
        ],
    )
    # Sent by the web processes, delivered by the worker.
    scraped(
        prometheus,
        "mcplet_bus_messages_total",
        [({"outcome": "sent"}, 2), ({"outcome": "delivered"}, 2)],
    )
    scraped(
        prometheus,
        "mcplet_agent_runs_finished_total",
        [({"state": "success"}, 1), ({"state": "cancelled"}, 1)],
    )
    scraped(
        prometheus,
        "mcplet_approvals_decided_total",
        [({"kind": "tool_call", "decision": "rejected"}, 1)],
    )
    scraped(
        prometheus,
        "mcplet_approval_decision_seconds_count",
        [({"kind": "tool_call", "decision": "rejected"}, 1)],
    )
    scraped(prometheus, "mcplet_approvals_pending", [({"kind": "tool_call"}, 0)])
    scraped(
        prometheus,
        'mcplet_audit_events_total{event_type="TOOL_EXECUTED"}',
        [({"event_type": "TOOL_EXECUTED"}, 2)],
    )

    # What an operator sees in Prometheus's own page (the README's picture of the metrics).
    graph = "sum by (tool, outcome) (mcplet_tool_calls_total)"
    page.goto(f"{prometheus}/graph?g0.expr={quote(graph)}&g0.tab=1&g0.range_input=5m")
    expect(page.get_by_text('tool="query_crm"').first).to_be_visible()
    screenshot(page, "metrics-prometheus")

    # The Grafana dashboard's queries are ones this Prometheus accepts.
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            query(prometheus, target["expr"])
