"""Traces (docs/tracing.md), in this process: off unless OTEL_* says otherwise, and when on, the
gateway's spans follow the MCP semantic conventions and `_meta.traceparent` carries them."""

import subprocess
import sys
import time

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import (
    TracerProvider,
    _default_tracer_configurator,
    _disable_tracer_configurator,
)
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from a2a import bus
from a2a.models import A2AMessage
from agents.models import Agent
from agents.tasks import deliver
from held import lifecycle
from mcplet_host import gateway, tracing
from mcplet_host.gateway.execute import trace_context
from mcplets.examples.programmable import serve_http, write_spec
from mcplets.examples.pwma_wallet import serve as serve_wallet
from pools import sessions as pools_sessions
from pools.discovery import discover
from pools.mcp_client import stdio_env
from pools.models import McpServer
from pools.watcher import start_in_thread as start_watcher
from tests.conftest import make_registry, reference_tools
from tests.mcplet_host.test_gateway import ASSERTION
from tests.processes import ROOT, environment, wait_until

EXPORTED = InMemorySpanExporter()


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "host"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
    ],
)
def test_traces_are_on_only_when_the_operator_says_so(environ, on):
    assert tracing.wanted(environ) is on  # the kit's servers share the rule (mcplets.otel)


def test_a_stdio_server_gets_the_hosts_otel_variables_under_its_own():
    host = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer host",
        "OTEL_SERVICE_NAME": "mcplet-host",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "DATABASE_URL": "postgres://secret",
    }
    configured = {"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer server", "X": "1"}
    assert stdio_env(configured, host) == {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer server",  # the operator's wins
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "X": "1",
    }  # no OTEL_SERVICE_NAME (each server names itself), nothing but OTEL_* of the host's
    # A server the operator named keeps its name.
    named = {"OTEL_SERVICE_NAME": "crm"}
    assert stdio_env(named, host)["OTEL_SERVICE_NAME"] == "crm"
    assert stdio_env({}, {"PATH": "/bin"}) == {}


def test_the_kit_loads_nothing_of_the_host():
    probe = (
        "import sys, mcplets.serving, mcplets.restaurant.crm, mcplets.examples.notes\n"
        "host = {'mcplet_host', 'agents', 'pools', 'held', 'a2a', 'passkey', 'dashboard'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in host))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=environment(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["[]"]


def test_off_the_host_loads_no_sdk_and_sets_up_no_provider():
    """A web process without OTEL_* (its ASGI app loaded, a span asked for): no tracing SDK,
    exporter or instrumentation imported, the API's default no-op provider. (redis-py loads
    the SDK's metrics part by itself when it is installed.)"""
    probe = (
        "import sys, django; django.setup(); import mcplet_host.asgi; "
        "from mcplet_host import tracing\n"
        "with tracing.span('x') as s: assert s is tracing.OFF and tracing.traceparent() == ''\n"
        "from opentelemetry import trace\n"
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk.trace', "
        "'opentelemetry.exporter', 'opentelemetry.instrumentation'))), "
        "type(trace.get_tracer_provider()).__name__)"
    )
    env = {k: v for k, v in environment().items() if not k.startswith("OTEL_")}
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["[]", "ProxyTracerProvider"]


@pytest.fixture
def traced(monkeypatch, settings):
    """Tracing on in this process, its spans kept in memory. The global provider is set once
    per process, so it stays; after the test its tracers are disabled (the SDK's tracer
    configurator, not public yet) and do what the API's no-op does — the MCP SDK's own span
    must not put a trace of its own in the `_meta` of later tests' calls."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTED))
        trace.set_tracer_provider(provider)
    provider._set_tracer_configurator(tracer_configurator=_default_tracer_configurator)
    monkeypatch.setattr(tracing, "ENABLED", True)
    settings.MCPLET_TRACE_CONTENT = False
    EXPORTED.clear()
    yield EXPORTED
    provider._set_tracer_configurator(tracer_configurator=_disable_tracer_configurator)
    EXPORTED.clear()


def test_meta_traceparent_is_the_current_span(traced):
    with tracing.span("work") as span:
        context = span.get_span_context()
        parent = trace_context("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")["traceparent"]
    assert parent == traceparent_of(context)
    assert tracing.trace_id(parent) == f"{context.trace_id:032x}"
    unsampled = f"00-{context.trace_id:032x}-{context.span_id:016x}-00"  # a partner's flag
    assert tracing.trace_id(unsampled) == ""  # nothing of it is recorded: no trace to link


def test_off_meta_traceparent_keeps_the_workflow_trace():
    parent = trace_context("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")["traceparent"]
    assert parent.split("-")[1] == "0f1e2d3c4b5a69788796a5b4c3d2e1f0"


def traceparent_of(context):
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def spans_by_name(exported):
    return {s.name: s for s in exported.get_finished_spans()}


@pytest.mark.django_db
def test_an_executed_call_follows_the_mcp_conventions(traced, registry, calls):
    outcome = gateway.call_tool(registry["planning"], "query_crm", {"filter": "rain"}, trace="c1")
    assert outcome.status == "executed"

    spans = spans_by_name(traced)
    decision, client = spans["call_tool"], spans["tools/call query_crm"]
    assert decision.attributes["mcplet.gateway.outcome"] == "executed"
    assert client.kind == trace.SpanKind.CLIENT
    assert client.parent.span_id == decision.context.span_id
    assert dict(client.attributes) == {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "query_crm",
        "mcplet.server": "reference",
    }
    # The MCP server got this trace: its parent is our client span, or the SDK's inside it.
    sdk = spans.get("MCP send tools/call query_crm")
    sent = calls("query_crm")[0]["meta"]["traceparent"].split("-")
    assert sent[1] == f"{client.context.trace_id:032x}"
    assert int(sent[2], 16) in {client.context.span_id, sdk and sdk.context.span_id}
    if sdk is not None:
        assert sdk.parent.span_id == client.context.span_id
    # No argument or result values unless the operator opts in.
    assert not any("rain" in str(v) for s in spans.values() for v in s.attributes.values())


@pytest.mark.django_db
def test_an_http_sessions_id_is_on_the_call_when_the_server_gives_one(traced, tmp_path):
    """2025-11-25 streamable HTTP: the server's `Mcp-Session-Id`, the same for every call of the
    long-lived session; a 2026-07-28 server opens no session: no attribute."""
    spec = write_spec(tmp_path / "tools.json", reference_tools())
    with serve_http(spec, protocols="2025") as old, serve_http(spec, protocols="2026") as new:
        registry = make_registry({"transport": "http", "url": old})
        for _ in range(2):
            gateway.call_tool(registry["planning"], "query_crm", {"filter": "rain"})
        session_ids = {
            s.attributes.get("mcp.session.id")
            for s in traced.get_finished_spans()
            if s.name == "tools/call query_crm"
        }
        assert len(session_ids) == 1 and len(session_ids.pop() or "") >= 16

        traced.clear()
        registry["server"].url = new
        registry["server"].save()
        gateway.call_tool(registry["planning"], "query_crm", {"filter": "rain"})
        client = spans_by_name(traced)["tools/call query_crm"]
        assert "error.type" not in client.attributes
        assert "mcp.session.id" not in client.attributes


@pytest.mark.django_db
def test_content_is_recorded_only_when_the_operator_opts_in(traced, settings, registry, calls):
    settings.MCPLET_TRACE_CONTENT = True
    gateway.call_tool(registry["planning"], "query_crm", {"filter": "rain"})
    client = spans_by_name(traced)["tools/call query_crm"]
    assert '"rain"' in client.attributes["gen_ai.tool.call.arguments"]
    assert "query_crm" in client.attributes["gen_ai.tool.call.result"]


@pytest.mark.django_db
def test_a_refusal_and_a_failure_say_why(traced, registry, calls):
    gateway.call_tool(registry["planning"], "drop_database", {})
    decision = spans_by_name(traced)["call_tool"]
    assert decision.attributes["mcplet.gateway.outcome"] == "refused"
    assert decision.attributes["mcplet.gateway.rule"] == "routable"
    assert "tools/call drop_database" not in spans_by_name(traced)  # nothing was sent


@pytest.mark.django_db
def test_a_held_call_links_to_the_span_that_held_it(traced, registry, calls, admin_user):
    """The person's wait is no span: what runs the call once approved, in a trace of its own,
    links to the span that held it."""
    args = {"to": ["sato@example.jp"], "body": "Free dessert tomorrow!"}
    outcome = gateway.call_tool(registry["dispatch"], "send_email", args, "app", "c7")
    assert outcome.status == "pending"
    decision = spans_by_name(traced)["call_tool"]
    assert decision.attributes["mcplet.gateway.outcome"] == "held"
    assert outcome.ceremony.traceparent == traceparent_of(decision.context)

    traced.clear()
    outcome.ceremony.approve(admin_user, assertion=ASSERTION)
    lifecycle.resume(outcome.ceremony.pk)
    spans = spans_by_name(traced)
    resumed, client = spans["resume_held_call"], spans["tools/call send_email"]
    assert [link.context.span_id for link in resumed.links] == [decision.context.span_id]
    assert resumed.context.trace_id != decision.context.trace_id
    assert client.parent.span_id == resumed.context.span_id
    assert len(calls("send_email")) == 1


@pytest.mark.django_db
def test_the_trace_page_links_the_runs_opentelemetry_trace(staff_client, settings):
    from django.urls import reverse

    from agents.models import Agent, AgentRun

    agent = Agent.objects.create(agent_id="info-gathering-agent", display_name="Info")
    context = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    AgentRun.objects.create(agent=agent, context_id=context, otel_trace_id=trace_id)
    page = reverse("dashboard:trace", args=[context])

    settings.MCPLET_TRACE_URL = ""
    assert f"<code>{trace_id}</code>" in staff_client.get(page).content.decode()
    settings.MCPLET_TRACE_URL = "https://jaeger.example/trace/{trace_id}"
    link = f'href="https://jaeger.example/trace/{trace_id}"'
    assert link in staff_client.get(page).content.decode()


def test_an_outgoing_a2a_call_carries_the_trace(traced):
    """The httpx instrumentation (set up with the provider) puts the current span's context in
    the `traceparent` header of a call to a remote A2A agent."""
    from contextlib import suppress
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from threading import Thread

    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    from a2a import outbound
    from tests.processes import free_port

    heard = []

    class Remote(BaseHTTPRequestHandler):
        def do_GET(self):
            heard.append(self.headers.get("traceparent"))
            self.send_error(404)

        def log_message(self, *args):
            pass

    remote = HTTPServer(("127.0.0.1", free_port()), Remote)
    Thread(target=remote.handle_request, daemon=True).start()
    HTTPXClientInstrumentor().instrument()
    try:
        with tracing.span("remote agent") as span, suppress(outbound.RemoteError):
            outbound.fetch_card(f"http://127.0.0.1:{remote.server_address[1]}", {})
    finally:
        HTTPXClientInstrumentor().uninstrument()
        remote.server_close()
    (sent,) = heard
    assert sent.split("-")[1] == f"{span.get_span_context().trace_id:032x}"


@pytest.mark.django_db(transaction=True)
def test_a_hand_off_delivered_by_the_worker_is_a_span_of_its_task(
    traced, registry, director, script
):
    """The worker that ends a run delivers its hand-off itself: a `deliver hand-off` span in
    the task's own trace, with the next agent's run inside it."""
    info, planning = registry["info"], registry["planning"]
    info.model = planning.model = script(
        {"info-gathering-agent": [{"json": {"analysis": "rain"}}], "planning-agent": [{"json": {}}]}
    )
    info.hands_off_to = planning
    info.save()
    planning.save()
    request = bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})
    with tracing.span("run/agents.deliver") as task:  # the test is the worker
        deliver(str(request.message_id), request.signature)

    hand_off = A2AMessage.objects.get(type="task_request", sender_id="info-gathering-agent")
    spans = spans_by_name(traced)
    delivered, run = spans["deliver hand-off"], spans["invoke_agent planning-agent"]
    assert delivered.attributes["messaging.message.id"] == str(hand_off.message_id)
    assert delivered.parent.span_id == task.get_span_context().span_id
    assert run.parent.span_id == delivered.context.span_id
    assert run.context.trace_id == task.get_span_context().trace_id


@pytest.mark.django_db(transaction=True)
def test_a_servers_notification_is_in_no_trace_of_the_call_that_opened_the_session(
    traced, monkeypatch
):
    """The session outlives the call that opened it: what the server later tells it (a
    wallet's step completed) is not a part of that call's trace."""
    told = []
    monkeypatch.setattr(pools_sessions, "enqueue", lambda *task: told.append(tracing.traceparent()))
    with serve_wallet() as wallet:
        server = McpServer.objects.create(name="wallet", transport="http", url=f"{wallet}/mcp")
        discover(server)
        agent = Agent.objects.create(agent_id="planning-agent", display_name="Planning")
        with tracing.span("the opener"):  # the call that opens the process's session
            assert gateway.call_tool(agent, "aaif.pwma.metadata", {}).status == "executed"
        arguments = {"requestId": "req-t", "walletIntent": {"type": "mandate", "payee": "B"}}
        held = gateway.call_tool(agent, "aaif.pwma.request", arguments).ceremony
        assert httpx.post(held.elicitations[1]["url"]).status_code == 200  # the holder approves
        wait_until(lambda: told, "the wallet's notification")
    assert told == [""]


@pytest.mark.django_db(transaction=True)
def test_runhosts_watcher_thread_starts_no_trace(traced, registry):
    """As the watcher's own process does not trace, its thread in runhost starts no trace: its
    discovery's MCP requests are no spans."""
    server = registry["server"]
    traced.clear()  # (the registry's own discovery)
    stop = start_watcher(poll_interval=0.2, ping_interval=0.3, timeout=5)
    try:
        wait_until(
            lambda: McpServer.objects.get(pk=server.pk).status == McpServer.Status.CONNECTED,
            "the watcher's discovery",
        )
        time.sleep(1)  # a few quiet intervals: pings, or re-lists
    finally:
        stop()
    assert [s.name for s in traced.get_finished_spans() if s.name.startswith("MCP ")] == []
