"""The discovery meta-tools in a run (MGP §16.5, §16.6), on the scripted model, through the real
gateway, bus and MCP server: what the model is offered, what it finds, what it may then call."""

import json

import pytest
from django.db.models.signals import post_save

from a2a import bus
from agents.models import Agent, AgentRun
from mcplet_host.models import AuditEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

META = ["mgp_tools_discover", "mgp_tools_request"]
DISCOVER_CUSTOMER = {"name": "mgp_tools_discover", "arguments": {"query": "customer record"}}
FIND = {"name": "find_customer", "arguments": {"email": "hanako@example.jp"}}


@pytest.fixture
def run_of(workspace, script):
    """Play `turns` as the assistant (in `mode`); returns its run, ended."""
    director = Agent.objects.create(agent_id="director", display_name="D", kind="director")
    director.targets.add(workspace["assistant"])

    def run_of(turns, mode=Agent.ToolMode.DISCOVERY, **fields):
        assistant = workspace["assistant"]
        assistant.model = script({"assistant": turns})
        assistant.tool_mode = mode
        for name, value in fields.items():
            setattr(assistant, name, value)
        assistant.save()
        request = bus.send_task("director", "assistant", {"ask": "help"})
        return AgentRun.objects.get(request=request)

    return run_of


def tool_results(run):
    return [json.loads(m["content"]) for m in run.transcript if m["role"] == "tool"]


def test_the_model_discovers_a_tool_then_calls_it(run_of, calls):
    run = run_of(
        [
            {"expect": {"tools_offered": META}, "tool_calls": [DISCOVER_CUSTOMER]},
            {
                "expect": {
                    "tools_offered": [*META, "find_customer"],
                    "tool_results_contain": ["find_customer", "inputSchema"],
                },
                "tool_calls": [FIND],
            },
            {"expect": {"tool_results_contain": ["Hanako Sato"]}, "text": "Gold customer."},
        ]
    )
    assert run.status == AgentRun.Status.SUCCESS, run.error
    assert [c["name"] for c in calls()] == ["find_customer"]
    assert run.discovered_tools[0] == "find_customer"
    found = tool_results(run)[0]
    assert found["search_strategy"] == "keyword" and found["total_available"] == 5
    assert found["tools"][0]["inputSchema"]["required"] == ["email"]
    assert found["tools"][0]["security"]["permissions_required"] == ["pool:crm-pool"]
    event = AuditEvent.objects.get(event_type="mcplet.tools.discovered")
    assert event.actor_id == "assistant" and event.trace_id == run.context_id
    assert event.details["query"] == "customer record" and event.details["results"] >= 1
    assert event.details["strategy"] == "keyword"


def test_a_name_called_in_the_turn_that_discovers_it_is_not_found(run_of, calls):
    """The model had not seen what its discover call would find: a call of a found name in
    the same turn, after it, is refused as before it (it ran, by its place in the turn)."""
    run = run_of(
        [
            {"tool_calls": [DISCOVER_CUSTOMER, FIND]},
            {"expect": {"tool_results_contain": ["NOT_FOUND"]}, "text": "I will call it next."},
        ]
    )
    assert run.status == AgentRun.Status.SUCCESS, run.error
    assert run.discovered_tools[0] == "find_customer"  # offered from the next turn on
    assert calls() == []
    assert tool_results(run)[1]["error"]["code"] == "NOT_FOUND"


@pytest.mark.parametrize("tool", ["list_calendar_events", "search_mailbox", "no_such_tool"])
def test_a_tool_not_found_first_is_refused_alike_whether_granted_or_not(run_of, calls, tool):
    """Granted but not discovered, not granted, or no such tool: one answer, nothing sent."""
    run = run_of(
        [
            {"tool_calls": [{"name": tool, "arguments": {}}]},
            {
                "expect": {"tool_errors": True, "tool_results_contain": ["mgp_tools_discover"]},
                "text": "I will search first.",
            },
        ]
    )
    assert run.status == AgentRun.Status.SUCCESS and calls() == []
    (refusal,) = tool_results(run)
    assert refusal["error"]["code"] == "NOT_FOUND"
    assert refusal["error"]["message"] == (
        f"No tool named {tool!r} is loaded: find one with mgp_tools_discover."
    )
    assert "mcpletType" not in json.dumps(refusal["_meta"])  # nothing said of the tool
    blocked = AuditEvent.objects.get(event_type="TOOL_BLOCKED")
    assert blocked.details["rule"] == "discovery" and blocked.target_server == ""


def test_a_found_tool_is_refused_once_its_grant_is_revoked(run_of, workspace, calls):
    def revoke(sender, instance, **kwargs):
        if instance.discovered_tools:
            workspace["assistant"].accessible_pools.remove(workspace["crm-pool"])

    post_save.connect(revoke, sender=AgentRun)
    try:
        run = run_of(
            [
                {"tool_calls": [DISCOVER_CUSTOMER]},
                {"expect": {"tool_results_contain": ["find_customer"]}, "tool_calls": [FIND]},
                {"expect": {"tool_results_contain": ["X_ACCESS_DENIED"]}, "text": "Refused."},
            ]
        )
    finally:
        post_save.disconnect(revoke, sender=AgentRun)
    assert run.status == AgentRun.Status.SUCCESS and calls() == []


def test_hybrid_offers_the_pinned_tools_it_may_call(run_of):
    pinned = ["get_weather", "search_mailbox", "find_customer"]
    run = run_of(
        [
            {"expect": {"tools_offered": [*META, "find_customer", "get_weather"]}, "text": "ok"},
        ],
        Agent.ToolMode.HYBRID,
        pinned_tools=pinned,
    )
    assert run.status == AgentRun.Status.SUCCESS, run.error


def test_automatic_mode_turns_to_hybrid_past_the_threshold(run_of, settings):
    everything = [
        "check_reservations",
        "find_customer",
        "get_weather",
        "list_calendar_events",
        "list_open_deals",
    ]
    settings.MCPLET_TOOL_DISCOVERY_THRESHOLD = 5
    run = run_of([{"expect": {"tools_offered": everything}, "text": "ok"}], Agent.ToolMode.AUTO)
    assert run.status == AgentRun.Status.SUCCESS, run.error
    settings.MCPLET_TOOL_DISCOVERY_THRESHOLD = 4
    run = run_of([{"expect": {"tools_offered": META}, "text": "ok"}], Agent.ToolMode.AUTO)
    assert run.status == AgentRun.Status.SUCCESS, run.error


def test_a_request_loads_what_it_can_and_names_what_it_cannot(run_of, calls):
    ask = {
        "reason": "capability_gap",
        "context": "the guest wants a booking checked and a letter translated",
        "requirements": {
            "capabilities": ["check the reservations of a day", "translate a letter to French"]
        },
    }
    run = run_of(
        [
            {"tool_calls": [{"name": "mgp.tools.request", "arguments": ask}]},
            {
                "expect": {"tools_offered": [*META, "check_reservations"]},
                "text": "Half of it.",
            },
        ]
    )
    assert run.status == AgentRun.Status.SUCCESS, run.error
    (answer,) = tool_results(run)
    assert answer["status"] == "partial"
    assert [t["name"] for t in answer["tools_loaded"]] == ["check_reservations"]
    assert answer["tools_unavailable"] == ["translate a letter to French"]
    assert answer["session_tools_count"] == 1 and answer["context_tokens_added"] > 0
    assert AuditEvent.objects.get(event_type="mcplet.tools.requested").details["results"] == 1
    assert calls() == []


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"query": 7},
        {"query": "x", "max_results": 1e400},
        {"query": "x", "max_results": float("nan")},  # passes every bound of the schema
        {"query": "x", "max_results": 0},
        {"query": "x", "max_results": 21},  # past what it answers: told, not cut in silence
        {"query": "x", "strategy": "psychic"},
        {"query": "x", "filter": {"categories": "crm-pool"}},
        {"__unparseable__": "Expecting value"},
    ],
)
def test_hostile_arguments_get_a_validation_error(run_of, arguments):
    run = run_of(
        [
            {"tool_calls": [{"name": "mgp_tools_discover", "arguments": arguments}]},
            {"expect": {"tool_results_contain": ["VALIDATION_ERROR"]}, "text": "ok"},
        ]
    )
    assert run.status == AgentRun.Status.SUCCESS, run.error
    assert run.discovered_tools == []


def test_hostile_text_is_searched_safely(run_of):
    arguments = {"query": "customer\x00\ud800 record", "filter": {"categories": ["\x00", "\ud800"]}}
    run = run_of(
        [
            {"tool_calls": [{"name": "mgp_tools_discover", "arguments": arguments}]},
            {"expect": {"tool_errors": False}, "text": "ok"},
        ]
    )
    assert run.status == AgentRun.Status.SUCCESS, run.error
    assert tool_results(run)[0]["total_available"] == 5
