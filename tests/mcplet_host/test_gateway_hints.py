"""MGP §14 hints an MCPlet sends survive to the agent; a read or prepare its server marks
retryable is tried again, bounded and audited — never an action; PWMA's JSON-RPC errors
(pwma-over-mcp §3.6) reach the agent as distinct codes."""

import json

import pytest

from agents.models import Agent
from held import lifecycle
from held.kinds import step_up
from held.models import Ceremony
from mcplet_host import gateway
from mcplet_host.models import AuditEvent
from mcplets.examples.programmable import stdio_params, write_spec
from pools.discovery import discover
from pools.models import McpServer
from pools.sessions import sessions
from tests.conftest import HOST_ONLY, entry

pytestmark = pytest.mark.django_db

HINTS = {
    "category": "resource",
    "retry_strategy": "fixed_delay",
    "max_retries": 3,
    "fallback_tool": "cached_stats",
    "details": {"limit": 10, "window_secs": 60},
}


def failing(code="X_BUSY", **hints):
    """A tool's own error envelope, with MGP recovery fields beside its code."""
    return {
        "result": {
            "error": {"code": code, "message": "try later", **hints},
            "_meta": {"timestamp": "2026-01-01T00:00:00.000Z", "toolId": "t"},
        }
    }


def rpc_error(code, data=None):
    return {"error": {"code": code, "message": f"wallet says {code}", "data": data}}


SUCCESS = {"result": {"visits": 7}}


@pytest.fixture
def serve(tmp_path, calls):
    """Discover a stdio server with these tools; returns an agent that may call them."""

    def start(*tools):
        spec = write_spec(tmp_path / "tools.json", list(tools))
        command, args = stdio_params(spec, calls_log=calls.path)
        server = McpServer.objects.create(
            name="hinting", transport="stdio", command=command, args=args
        )
        discover(server)
        return Agent.objects.create(agent_id="planning-agent", display_name="Planning")

    return start


def retried(tool):
    return list(
        AuditEvent.objects.filter(event_type="mcplet.tool.retried", target_tool=tool)
        .order_by("pk")
        .values_list("details", flat=True)
    )


def test_a_retryable_read_is_tried_again_after_the_wait_it_asks_for(serve, calls):
    wait = failing(retryable=True, retry_after_ms=30, **HINTS)
    agent = serve(entry("site_stats") | {"answers": [wait, wait, SUCCESS]})

    outcome = gateway.call_tool(agent, "site_stats", {}, trace="ctx-1")

    assert outcome.envelope["result"] == {"visits": 7}
    assert len(calls("site_stats")) == 3
    assert [(d["attempt"], d["wait_ms"], d["code"]) for d in retried("site_stats")] == [
        (2, 30, "X_BUSY"),
        (3, 30, "X_BUSY"),
    ]
    failures = AuditEvent.objects.filter(event_type="TOOL_EXECUTED", result="FAILURE")
    assert failures.count() == 2 and {e.trace_id for e in failures} == {"ctx-1"}


def test_the_hints_reach_the_agent_when_the_retries_run_out(serve, calls, settings):
    settings.MCPLET_TOOL_RETRIES = 1
    agent = serve(entry("site_stats") | {"answers": [failing(retryable=True, **HINTS)]})

    outcome = gateway.call_tool(agent, "site_stats", {})

    assert outcome.envelope["error"] == {
        "code": "X_BUSY",
        "message": "try later",
        "retryable": True,
        **HINTS,
    }
    assert len(calls("site_stats")) == 2 and len(retried("site_stats")) == 1


def test_the_server_may_ask_for_fewer_retries_and_backoff_grows(serve, calls, settings):
    settings.MCPLET_TOOL_RETRIES = 5
    hints = {"retryable": True, "retry_strategy": "exponential_backoff", "max_retries": 2}
    agent = serve(entry("site_stats") | {"answers": [failing(retry_after_ms=10, **hints)]})

    gateway.call_tool(agent, "site_stats", {})

    assert len(calls("site_stats")) == 3
    assert [d["wait_ms"] for d in retried("site_stats")] == [100, 200]


@pytest.mark.parametrize(
    "hints",
    [
        {"retryable": False, "retry_after_ms": 10},
        {"retry_after_ms": 10},  # retryable unsaid: not retried
        {"retryable": True, "retry_after_ms": 60_000},  # longer than a worker may sleep
    ],
)
def test_no_retry_unless_the_server_marks_it_and_the_wait_is_short(serve, calls, hints):
    agent = serve(entry("site_stats") | {"answers": [failing(**hints), SUCCESS]})

    outcome = gateway.call_tool(agent, "site_stats", {})

    assert outcome.envelope["error"]["retry_after_ms"] == hints["retry_after_ms"]
    assert len(calls("site_stats")) == 1 and retried("site_stats") == []


def test_an_action_is_never_retried(serve, calls, admin_user):
    action = entry("book_table", "action", ("app",), auth=HOST_ONLY)
    agent = serve(action | {"answers": [failing(retryable=True, retry_after_ms=0), SUCCESS]})

    ceremony = gateway.call_tool(agent, "book_table", {}, "app").ceremony
    ceremony.approve(admin_user)
    lifecycle.resume(ceremony.pk)

    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.FAILED
    assert ceremony.result["error"]["retryable"] is True  # the agent is told, the host waits
    assert len(calls("book_table")) == 1 and retried("book_table") == []


@pytest.mark.parametrize(
    "hints",
    [
        {"retry_after_ms": -5, "max_retries": 1.5, "category": "weather"},
        {"retry_after_ms": "soon", "retry_strategy": "forever", "fallback_tool": "a\x00b"},
        {"retry_after_ms": 1e300, "details": {"note": "\x00"}, "retryable": "yes"},
        {"details": {"blob": "x" * 5000}, "fallback_tool": ""},
    ],
)
def test_malformed_hints_are_dropped_not_passed_on(serve, calls, hints):
    agent = serve(entry("site_stats") | {"answers": [failing(**hints)]})

    outcome = gateway.call_tool(agent, "site_stats", {})

    assert outcome.envelope["error"] == {"code": "X_BUSY", "message": "try later"}
    assert len(calls("site_stats")) == 1


PWMA = [
    (-32040, "X_PWMA_POLICY_DENIED", False),
    (-32041, "X_PWMA_BAD_REQUEST", False),
    (-32043, "X_PWMA_UPSTREAM_ERROR", True),
    (-32044, "X_PWMA_VAULT_LOCKED", True),
]


@pytest.mark.parametrize(("rpc", "code", "retryable"), PWMA)
def test_pwma_errors_reach_the_agent_as_their_own_codes(serve, calls, rpc, code, retryable):
    agent = serve(entry("aaif.pwma.request") | {"answers": [rpc_error(rpc), SUCCESS]})

    outcome = gateway.call_tool(agent, "aaif.pwma.request", {})

    error = outcome.envelope["error"]
    assert (error["code"], error["retryable"]) == (code, retryable)
    assert error["message"].startswith(f"wallet says {rpc} (PWMA {rpc}: ")
    # The host's own reading of a code is for the agent: only the server's hints retry.
    assert len(calls("aaif.pwma.request")) == 1
    event = AuditEvent.objects.get(event_type="TOOL_EXECUTED")
    assert event.details["code"] == code


def test_a_wallets_own_mgp_hints_win_and_retry(serve, calls):
    upstream = rpc_error(-32043, {"_mgp": {"retryable": True, "retry_after_ms": 20}})
    agent = serve(entry("aaif.pwma.request") | {"answers": [upstream, SUCCESS]})

    outcome = gateway.call_tool(agent, "aaif.pwma.request", {})

    assert outcome.envelope["result"] == {"visits": 7}
    assert len(calls("aaif.pwma.request")) == 2
    assert [d["code"] for d in retried("aaif.pwma.request")] == ["X_PWMA_UPSTREAM_ERROR"]


def test_another_json_rpc_error_keeps_its_hints(serve, calls):
    limited = rpc_error(7000, {"_mgp": {"category": "resource", "retry_after_ms": 5000}})
    agent = serve(entry("site_stats") | {"answers": [limited]})

    error = gateway.call_tool(agent, "site_stats", {}).envelope["error"]

    assert error["code"] == "UNKNOWN_ERROR" and "(7000)" in error["message"]
    assert (error["category"], error["retry_after_ms"]) == ("resource", 5000)
    assert json.dumps(error)  # what the agent reads


@pytest.mark.parametrize(
    ("mgp", "code", "name"),
    [
        (1002, "AUTH_REQUIRED", "AUTH_REQUIRED"),
        (3000, "RATE_LIMITED", "RATE_LIMITED"),
        (4000, "VALIDATION_ERROR", "INVALID_TOOL_ARGS"),
        (4001, "NOT_FOUND", "TOOL_NOT_FOUND"),
        (5002, "SERVICE_UNAVAILABLE", "UPSTREAM_UNAVAILABLE"),
    ],
)
def test_mgp_standard_codes_reach_the_agent_by_their_meaning(serve, calls, mgp, code, name):
    """MGP §14.3: a server's standard code is read as the §9.1 code an agent acts on (they
    all read UNKNOWN_ERROR), its name in the message, its own hints kept."""
    answer = rpc_error(mgp, {"_mgp": {"retryable": False, "details": {"limit": 10}}})
    agent = serve(entry("site_stats") | {"answers": [answer]})

    error = gateway.call_tool(agent, "site_stats", {}).envelope["error"]

    assert error["code"] == code
    assert error["message"] == f"wallet says {mgp} (MGP {mgp}: {name})"
    assert (error["retryable"], error["details"]) == (False, {"limit": 10})
    assert len(calls("site_stats")) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager")
def test_the_agents_tool_message_carries_the_servers_hints(serve, calls, script):
    from a2a import bus
    from agents.models import AgentRun

    agent = serve(entry("site_stats") | {"answers": [failing(retry_after_ms=250, **HINTS)]})
    agent.model = script(
        {
            "planning-agent": [
                {"tool_calls": [{"name": "site_stats", "arguments": {}}]},
                {
                    "expect": {"tool_errors": True, "tool_results_contain": ["cached_stats"]},
                    "text": "later",
                },
            ]
        }
    )
    agent.save()
    Agent.objects.create(agent_id="director", display_name="Director", kind=Agent.Kind.DIRECTOR)

    run = AgentRun.objects.get(request=bus.send_task("director", "planning-agent", {}))

    assert run.status == AgentRun.Status.SUCCESS
    (message,) = [m for m in run.transcript if m["role"] == "tool"]
    error = json.loads(message["content"])["error"]
    assert error == {"code": "X_BUSY", "message": "try later", "retry_after_ms": 250, **HINTS}
    assert len(calls("site_stats")) == 1


STEP = {
    "elicitations": [
        {
            "elicitationId": "e-1",
            "mode": "url",
            "message": "Confirm at your bank",
            "url": "https://bank.example/confirm/e-1",
        }
    ]
}


def test_a_strict_actions_step_up_needs_a_fresh_assertion_for_the_same_call(
    serve, calls, admin_user
):
    from tests.conftest import STRICT
    from tests.mcplet_host.test_gateway import ASSERTION

    action = entry("pay", "action", ("app",), auth=STRICT)
    agent = serve(action | {"answers": [rpc_error(-32042, STEP), SUCCESS]})
    arguments = {"amount": 120}
    first = gateway.call_tool(agent, "pay", arguments, "app", continuation_ref="run:pay").ceremony
    first.approve(admin_user, assertion=ASSERTION)
    lifecycle.resume(first.pk)

    step = Ceremony.objects.filter(continuation_ref="run:pay").first()
    assert step.kind == Ceremony.Kind.STEP_UP and step.enforcement == "strict"
    assert step.elicitations[0]["domain"] == "bank.example"
    assert step_up.complete(step, admin_user)
    lifecycle.resume(step.pk)

    # Done stepping, but the first assertion was used once: nothing is sent without a new one.
    assert len(calls("pay")) == 1
    again = Ceremony.objects.filter(continuation_ref="run:pay").first()
    assert again.kind == Ceremony.Kind.TOOL_CALL and again.status == Ceremony.Status.PENDING
    assert (again.arguments, again.arguments_hash) == (arguments, first.arguments_hash)
    assert again.nonce != first.nonce  # a new challenge, bound to the same call
    fresh = ASSERTION | {"signature": "QW5vdGhlci1zaWduYXR1cmU"}
    again.approve(admin_user, assertion=fresh)
    lifecycle.resume(again.pk)

    sent = calls("pay")
    assert [c["arguments"] for c in sent] == [arguments, arguments]
    assert sent[1]["meta"]["mcplet_auth"] == fresh
    again.refresh_from_db()
    assert again.status == Ceremony.Status.EXECUTED and again.result["result"] == {"visits": 7}


def test_an_envelope_in_text_content_is_read_as_one(serve, calls):
    """A server of a revision before structuredContent (or a text-only MCPlet) sends its §9.1
    envelope as text: its result is the result, its error's code and hints reach the agent and
    its retries, not an UNKNOWN_ERROR wrapping the envelope."""
    ok = {"result": {"visits": 7}, "_meta": {"timestamp": "2026-01-01T00:00:00.000Z"}}
    agent = serve(
        entry("text_stats") | {"textOnly": True, "result": ok},
        entry("text_busy")
        | {"textOnly": True, "answers": [failing(retryable=True, retry_after_ms=30), SUCCESS]},
    )
    assert gateway.call_tool(agent, "text_stats", {}).envelope["result"] == {"visits": 7}
    assert gateway.call_tool(agent, "text_busy", {}).envelope["result"] == {"visits": 7}
    assert len(calls("text_busy")) == 2
    assert [d["code"] for d in retried("text_busy")] == ["X_BUSY"]


def test_a_result_breaking_the_tools_output_schema_is_an_answer(serve, calls):
    """The MCP SDK refuses a result against the tool's outputSchema: the server answered, so
    the call ran and its result is invalid (not "no answer came"), and the session stays."""
    typed = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    agent = serve(
        entry("typed_count")
        | {"outputSchema": typed, "answers": [{"result": {"n": "x"}}, {"result": {"n": 2}}]}
    )
    server = McpServer.objects.get()
    first = gateway.call_tool(agent, "typed_count", {})
    assert first.envelope["error"]["code"] == "X_INVALID_RESULT"
    assert "the tool ran" in first.envelope["error"]["message"]
    held = sessions._held[server.pk]  # the stdio server's process and session
    assert gateway.call_tool(agent, "typed_count", {}).envelope["result"] == {"n": 2}
    assert sessions._held[server.pk] is held  # not dropped, not relaunched
    assert len(calls("typed_count")) == 2


def test_a_result_over_the_hosts_limit_goes_no_further(serve, calls, settings):
    """MGP §16.1's payload size limits: a result an agent, its transcript and its model would
    carry whole is refused past MCPLET_MAX_RESULT, as text or as structured content."""
    settings.MCPLET_MAX_RESULT = 2048
    agent = serve(
        entry("big_text") | {"textOnly": True, "result": {"rows": "x" * 5000}},
        entry("big_data") | {"result": {"rows": ["y" * 100] * 50}},
        entry("small") | {"result": {"rows": "z" * 1000}},
    )
    for name in ("big_text", "big_data"):
        error = gateway.call_tool(agent, name, {}).envelope["error"]
        assert error["code"] == "X_RESULT_TOO_LARGE" and "the tool ran" in error["message"]
    assert gateway.call_tool(agent, "small", {}).envelope["result"] == {"rows": "z" * 1000}
    assert len(calls()) == 3
