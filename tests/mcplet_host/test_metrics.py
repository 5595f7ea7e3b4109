"""/metrics: off without METRICS_TOKEN, the bearer's only with it, never a 500; and what the
gateway, the held calls and the audit chain count (in this process: no multiprocess directory).
tests/mcplet_host/test_metrics_prometheus.py has a real Prometheus scrape real processes."""

import os
import subprocess

import pytest
from prometheus_client import REGISTRY, generate_latest

from mcplet_host import gateway, metrics
from tests.mcplet_host.test_gateway import ASSERTION

pytestmark = pytest.mark.django_db

TOKEN = "s3cret-metrics-token"


def value(name, **labels):
    return REGISTRY.get_sample_value(name, labels) or 0


@pytest.fixture
def token(settings):
    settings.METRICS_TOKEN = TOKEN
    return TOKEN


def test_without_a_token_set_the_endpoint_is_not_there(client, settings):
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 404


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        f"Bearer {TOKEN[:-1]}",
        f"Bearer {TOKEN}x",
        f"Basic {TOKEN}",
        f"Bearer{TOKEN}",
        "Bearer \u00e9\u00e8\u2603",
        "Bearer \udcff",
        "Bearer " + "A" * 100_000,
    ],
)
def test_only_the_bearer_of_the_token_reads_it(client, token, header):
    extra = {} if header is None else {"HTTP_AUTHORIZATION": header}
    response = client.get("/metrics", **extra)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"mcplet_" not in response.content


@pytest.mark.parametrize("header", [f"bearer {TOKEN}", f"BEARER {TOKEN}", f"Bearer  {TOKEN}"])
def test_the_scheme_is_read_in_any_case_and_after_any_spaces(client, token, header):
    """RFC 9110 §11.1 and §11.4: `auth-scheme 1*SP token68`, the scheme case-insensitive."""
    assert client.get("/metrics", HTTP_AUTHORIZATION=header).status_code == 200


def test_a_post_is_told_the_methods_it_may_use(token):
    from django.test import Client

    answer = Client(enforce_csrf_checks=True).post("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert answer.status_code == 405 and answer["Allow"] == "GET, HEAD"


def test_the_bearer_reads_the_series(client, token):
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert "no-cache" in response["Cache-Control"]
    text = response.content.decode()
    assert "# TYPE mcplet_tool_calls_total counter" in text
    assert "# TYPE mcp_client_operation_duration_seconds histogram" in text
    assert 'mcplet_approvals_pending{kind="tool_call"} 0.0' in text
    assert 'mcplet_agent_runs{state="awaiting_approval"} 0.0' in text
    assert "_created" not in text  # as in multiprocess mode: `runhost` and `serve` alike


def test_hostile_requests_are_refused_without_a_500(client, token):
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    assert client.post("/metrics", **bearer).status_code in (403, 405)
    assert client.generic("BREW", "/metrics", **bearer).status_code == 405
    assert client.get("/metrics?x=%ff%fe&name[]=1", **bearer).status_code == 200
    assert client.get("/metrics/", **bearer).status_code == 404


@pytest.mark.parametrize(
    ("code", "kept"),
    [
        ("X_PWMA_VAULT_LOCKED", "X_PWMA_VAULT_LOCKED"),
        ("X_RESULT_TOO_LARGE", "X_RESULT_TOO_LARGE"),
        ("X_INVALID_RESULT", "X_INVALID_RESULT"),
        ("SERVICE_UNAVAILABLE", "SERVICE_UNAVAILABLE"),
        ("X_WHATEVER_A_SERVER_SAYS", "_OTHER"),
    ],
)
def test_the_hosts_own_error_codes_are_kept(registry, code, kept):
    mcplet = registry["server"].mcplets.get(name="query_crm")
    labels = {"mcp_method_name": "tools/call", "gen_ai_tool_name": "query_crm"}
    labels |= {"server": "reference", "error_type": kept}
    before = value("mcp_client_operation_duration_seconds_count", **labels)
    metrics.mcp_call(mcplet, 0.1, code)
    assert value("mcp_client_operation_duration_seconds_count", **labels) == before + 1


SERIES = {
    "ok": ("mcplet_tool_calls_total", {"tool": "query_crm", "pool": "", "outcome": "success"}),
    "refused": ("mcplet_gateway_refusals_total", {"rule": "routable"}),
    "unnamed": ("mcplet_tool_calls_total", {"tool": "", "pool": "", "outcome": "refused"}),
    "held": (
        "mcplet_tool_calls_total",
        {"tool": "send_email", "pool": "media-pool", "outcome": "held"},
    ),
    "approved": (
        "mcplet_approvals_decided_total",
        {"kind": "tool_call", "decision": "approved"},
    ),
    "waited": (
        "mcplet_approval_decision_seconds_count",
        {"kind": "tool_call", "decision": "approved"},
    ),
    "took": (
        "mcp_client_operation_duration_seconds_count",
        {
            "mcp_method_name": "tools/call",
            "gen_ai_tool_name": "query_crm",
            "server": "reference",
            "error_type": "",
        },
    ),
    "audited": ("mcplet_audit_events_total", {"event_type": "TOOL_EXECUTED"}),
}


def sampled():
    return {key: value(name, **labels) for key, (name, labels) in SERIES.items()}


def test_the_gateway_counts_calls_refusals_durations_and_decisions(registry, admin_user):
    assert value("mcplet_discovery_verdicts_total", server="reference", verdict="accepted") >= 7
    before = sampled()
    planning, dispatch = registry["planning"], registry["dispatch"]
    assert gateway.call_tool(planning, "query_crm", {"filter": "rain"}).status == "executed"
    assert gateway.call_tool(planning, "no_such_tool\u0000", {}).status == "refused"
    assert gateway.call_tool(planning, "no_such_tool", {}).status == "refused"
    held = gateway.call_tool(dispatch, "send_email", {"to": ["a@example.jp"], "body": "x"}, "app")
    assert held.status == "pending"
    assert held.ceremony.approve(admin_user, assertion=ASSERTION)

    after = sampled()
    assert {key: after[key] - before[key] for key in SERIES} == {
        "ok": 1,
        "refused": 1,  # the NUL name breaks the input rule
        "unnamed": 2,  # neither name is a tool's: no label holds it
        "held": 1,
        "approved": 1,
        "waited": 1,
        "took": 1,
        "audited": 1,
    }
    assert "no_such_tool" not in generate_latest(REGISTRY).decode()


def test_a_start_removes_only_this_hosts_ended_processes_files(tmp_path):
    child = subprocess.Popen(["sleep", "30"])
    try:
        files = {
            "mine": f"counter_{metrics.HOST}-{os.getpid()}.db",
            "running": f"histogram_{metrics.HOST}-{child.pid}.db",
            "ended": f"counter_{metrics.HOST}-{ended_pid()}.db",
            "elsewhere": f"counter_other-host-{ended_pid()}.db",
            "prefix": f"counter_{metrics.HOST}x-{ended_pid()}.db",
        }
        for name in files.values():
            (tmp_path / name).write_bytes(b"")
        metrics.remove_dead_files(str(tmp_path))
        kept = {path.name for path in tmp_path.iterdir()}
        assert kept == {name for key, name in files.items() if key != "ended"}
    finally:
        child.kill()
        child.wait()


def ended_pid():
    """A pid no process has now (a reaped child's; reused only after the pids wrap)."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid
