"""A real Prometheus (Debian's package; `make prometheus`) scrapes `manage.py serve`'s two web
processes while a Celery worker runs a partner's tasks: every process counts into one
PROMETHEUS_MULTIPROC_DIR, one bearer-token scrape of the web reads them all, and the queries
over Prometheus's HTTP API find what happened — the partner's requests (web), the tool calls,
their durations and the refusal (worker), a held call pending, then rejected by a person in
admin (web), and the runs as they ended (worker)."""

import json
import time
from urllib.parse import quote

import httpx
import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from a2a import messages
from a2a.models import PartnerKey
from agents.models import AgentRun
from held.models import Ceremony
from tests.browser import screenshot
from tests.processes import (
    ROOT,
    script,  # noqa: F401 (a fixture)
    scripts,  # noqa: F401 (a fixture)
    signed_in,
    wait_until,
)
from tests.prometheus import query, scraped, scraped_host

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

SEND = {"tool": "send_email", "arguments": {"to": ["sato@example.jp"], "body": "Hi"}}


@pytest.fixture
def host(tmp_path, scripts):  # noqa: F811
    """(web URL, Prometheus URL): `serve` with two processes and a worker, one metrics
    directory, and Prometheus scraping the web."""
    env = {"DJANGO_SETTINGS_MODULE": "tests.settings", "MCPLET_SCRIPT_DIRS": str(scripts)}
    with scraped_host(tmp_path, env) as urls:
        yield urls


def admin_reject(web, ceremony):
    """An operator rejects the held call with admin's action, over HTTP to the web."""
    staff = get_user_model().objects.create_superuser("operator", "op@example.org", "pw-op-1")
    with signed_in(web, staff) as browser:
        done = browser.post(
            "/admin/held/ceremony/",
            data={"action": "reject", "_selected_action": str(ceremony.pk), "index": "0"},
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
