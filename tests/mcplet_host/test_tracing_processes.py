"""One connected trace across real processes (docs/tracing.md): a partner's task, sent with its
own W3C traceparent to `manage.py serve`'s web processes, runs on a Celery worker whose agent
calls an MCP tool on a stdio MCP server the worker launched — and an OTLP/HTTP receiver here,
decoding the protobufs with the official `opentelemetry-proto`, gets every span of it in the
partner's trace, each with its right parent, the MCP call's on both sides (the host's client
span, the server's own) by the MCP semantic conventions, and no argument value."""

import secrets
import threading

import httpx
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from playwright.sync_api import expect

from a2a import messages
from a2a.models import PartnerKey
from agents.models import AgentRun
from tests.browser import screenshot, use_session
from tests.otlp import Receiver, value
from tests.processes import (
    free_port,
    script,  # noqa: F401 (a fixture)
    scripts,  # noqa: F401 (a fixture)
    serve_with_worker,
    wait_until,
)

TRACE_URL = "https://traces.example/trace/{trace_id}"

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def receiver():
    server = Receiver(free_port())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


@pytest.fixture
def host(tmp_path, scripts, receiver):  # noqa: F811
    """`serve` with two web processes and a worker, both exporting to the receiver."""
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "MCPLET_SCRIPT_DIRS": str(scripts),
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # ms: the spans reach the receiver soon after
        "MCPLET_TRACE_URL": TRACE_URL,
    }
    with serve_with_worker(tmp_path, env) as web:
        yield web


def test_a_partner_task_is_one_trace_from_the_web_through_the_worker_to_the_mcp_call(
    host,
    receiver,
    registry,
    script,  # noqa: F811
    calls,
    page,
    admin_user,
):
    partner, info = registry["partner"], registry["info"]
    partner.callable_agents.set([info])
    partner.accessible_pools.set([registry["info-pool"]])
    info.model = script(
        {
            "info-gathering-agent": [
                {"tool_calls": [{"name": "query_crm", "arguments": {"filter": "rain"}}]},
                {"json": {"analysis": "rain tomorrow"}},
            ]
        }
    )
    info.save()
    _, key = PartnerKey.issue(partner, "traces")
    trace_id, partner_span = secrets.token_hex(16), secrets.token_hex(8)
    headers = {"Authorization": f"Bearer {key}", "traceparent": f"00-{trace_id}-{partner_span}-01"}
    body = messages.task_request("partner-bot", "info-gathering-agent", {"store": "shinjuku"})
    answer = httpx.post(f"{host}/a2a/tasks", json=body, headers=headers, timeout=60)
    assert answer.status_code in (200, 202), answer.text
    wait_until(lambda: AgentRun.objects.filter(status="success").exists(), "the run to end")

    def arrived():
        kinds = {(r["service.name"], s.name, s.kind) for r, s in receiver.trace(trace_id).values()}
        web = any(k[0] == "mcplet-host" and k[2] == Span.SPAN_KIND_SERVER for k in kinds)
        mcp = ("programmable", "tools/call query_crm", Span.SPAN_KIND_SERVER) in kinds
        task = ("mcplet-host", "run/agents.deliver", Span.SPAN_KIND_CONSUMER) in kinds
        return web and mcp and task

    wait_until(arrived, "the web's, the worker's and the MCP server's spans", timeout=30)
    spans = receiver.trace(trace_id)
    host_spans = [s for r, s in spans.values() if r["service.name"] == "mcplet-host"]
    by_name = {s.name: s for s in host_spans}

    def parent(span):
        return spans[span.parent_span_id.hex()][1]

    # The web accepted the partner's context: its server span is the partner span's child.
    (web,) = [s for s in host_spans if s.kind == Span.SPAN_KIND_SERVER]
    assert web.parent_span_id.hex() == partner_span
    # The Celery hop: the worker's task is the child of the web's publish.
    run_task = by_name["run/agents.deliver"]
    assert parent(run_task).name == "apply_async/agents.deliver"
    above = parent(run_task)
    while above.span_id != web.span_id:  # the publish happened inside the partner's request
        above = parent(above)
    # The agent's run, its LLM turn, the gateway's decision and the MCP call.
    agent = by_name["invoke_agent info-gathering-agent"]
    decision = by_name["call_tool"]
    client = by_name["tools/call query_crm"]
    assert parent(agent).span_id == run_task.span_id
    chats = [s for s in host_spans if s.name.startswith("chat ")]
    assert len(chats) == 2 and all(parent(c).span_id == agent.span_id for c in chats)
    assert parent(decision).span_id == agent.span_id
    assert parent(client).span_id == decision.span_id
    assert client.kind == Span.SPAN_KIND_CLIENT
    attributes = {a.key: value(a.value) for a in client.attributes}
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["gen_ai.tool.name"] == "query_crm"
    assert "error.type" not in attributes
    # The MCP server got the trace in `_meta`, as a span of it: the MCP SDK's own client span,
    # inside ours.
    sent = calls("query_crm")[0]["meta"]["traceparent"].split("-")
    assert sent[1] == trace_id
    (sdk,) = [s for s in host_spans if s.span_id.hex() == sent[2]]
    assert (sdk.name, sdk.kind) == ("MCP send tools/call query_crm", Span.SPAN_KIND_CLIENT)
    assert parent(sdk).span_id == client.span_id
    # The MCP server's own span (the SDK's server middleware; the kit set up its exporter from
    # the OTEL_* the host passed on): the child of what it got, under the server's own name.
    # (A session opened by the call itself adds its server/discover and tools/list.)
    ((resource, served),) = [
        (r, s)
        for r, s in spans.values()
        if r["service.name"] != "mcplet-host" and s.name == client.name
    ]
    assert resource["service.name"] == "programmable"
    assert served.kind == Span.SPAN_KIND_SERVER
    assert served.parent_span_id.hex() == sent[2]
    attributes = {a.key: value(a.value) for a in served.attributes}
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["gen_ai.tool.name"] == "query_crm"
    assert "error.type" not in attributes
    # Every host process is the host's service; no argument value anywhere.
    assert {r["service.name"] for r, _ in spans.values()} == {"mcplet-host", "programmable"}
    everything = [str(value(a.value)) for _, s in spans.values() for a in s.attributes]
    assert not any("rain" in v for v in everything)

    # The run's page on the dashboard names the trace and links to it (the README's picture).
    run = AgentRun.objects.get(status="success")
    use_session(page, host, admin_user)
    page.goto(f"{host}/dashboard/runs/{run.context_id}/")
    link = page.locator(".otel-trace a")
    expect(link).to_have_text(trace_id)
    assert link.get_attribute("href") == TRACE_URL.format(trace_id=trace_id)
    screenshot(page, "dashboard-trace-otel")

    # What a URL may hold reaches no trace store: an OAuth callback's code and state, a held
    # call's token (its approval page's path).
    for path in (
        "/oauth/callback?code=CODE-SECRET&state=STATE-SECRET",
        "/passkey/ceremonies/TOKEN-SECRET/",
    ):
        other = secrets.token_hex(16)
        context = {"traceparent": f"00-{other}-{secrets.token_hex(8)}-01"}
        httpx.get(host + path, headers=context, timeout=30)
        wait_until(lambda other=other: receiver.trace(other), f"the span of {path}", timeout=30)
        (served,) = [s for _, s in receiver.trace(other).values()]
        kept = {a.key: str(value(a.value)) for a in served.attributes}
        assert not any("SECRET" in v for v in kept.values()), kept
        assert any(
            path.split("?")[0].replace("TOKEN-SECRET", "{token}") in v for v in kept.values()
        )
