"""What a model answers is hostile input too: arguments that are not JSON are refused and
nothing is sent; an answer with what the host cannot store or sign (a lone surrogate: half an
emoji, a NUL) is written out, never a crashed run or a page that fails for good; proposed
actions that are not a list of objects are refused, not ignored."""

import pytest

from a2a import bus
from agents.ending import LLM_FAILED
from agents.models import Agent, AgentRun
from mcplet_host.authority import Authority
from mcplet_host.models import AuditEvent
from mcplet_host.signals import audit_recorded
from tests.agents.openai_stub import openai_stub, text_response
from tests.agents.test_runner import response_to, send

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]


@pytest.mark.parametrize("raw", ['{"filter": ', '{"filter": "ra', "not json at all"])
def test_arguments_that_are_not_json_are_refused_and_nothing_is_sent(
    registry, director, script, calls, raw
):
    dispatch = registry["dispatch"]  # read_site_stats requires nothing: anything validated
    dispatch.model = script(
        {
            "dispatch-agent": [
                {"tool_calls": [{"name": "read_site_stats", "arguments": raw}]},
                {"expect": {"tool_results_contain": ["VALIDATION_ERROR"]}, "text": "retold"},
            ]
        }
    )
    dispatch.save()
    _, run = send("dispatch-agent")
    assert run.status == AgentRun.Status.SUCCESS and run.result == {"answer": "retold"}
    assert calls() == []
    blocked = AuditEvent.objects.get(event_type="TOOL_BLOCKED", target_tool="read_site_stats")
    assert blocked.details["rule"] == "arguments"


def test_an_answer_with_half_an_emoji_is_written_out_and_handed_on(
    registry, director, script, client, admin_user
):
    info = registry["info"]
    info.model = script(
        {"info-gathering-agent": [{"text": '{"analysis": "coupon \\ud83d for all\\u0000"}'}]}
    )
    info.save()
    request, run = send("info-gathering-agent")
    assert run.status == AgentRun.Status.SUCCESS, run.error
    assert run.result == {"analysis": "coupon \\ud83d for all\\x00"}
    assert response_to(request)["payload"]["result"] == run.result
    client.force_login(admin_user)
    assert client.get(f"/dashboard/runs/{run.context_id}/").status_code == 200


@pytest.mark.parametrize("actions", [{"tool": "send_email", "arguments": {}}, 5, ["send_email"]])
def test_actions_that_are_not_a_list_of_objects_are_refused(
    registry, director, script, calls, actions
):
    info = registry["info"]
    info.model = script({"info-gathering-agent": [{"json": {"summary": "x", "actions": actions}}]})
    info.save()
    _, run = send("info-gathering-agent")
    assert run.status == AgentRun.Status.ERROR
    assert run.error["code"] == "VALIDATION_ERROR"
    assert "must be a list of objects" in run.error["message"]
    assert calls() == []


def test_a_partners_work_is_told_its_model_failed_not_the_providers_words(
    registry, director, script
):
    """The provider's own message may echo a key or an account: the run keeps it for the
    operators; the partner's task is told the model failed."""
    info = registry["info"]
    info.model = script({"info-gathering-agent": [{"error": {"kind": "server", "times": 9}}]})
    info.save()
    partner = Authority.of_partner("partner-bot")
    request = bus.send_task("director", "info-gathering-agent", {"store": "x"}, authority=partner)
    run = AgentRun.objects.get(request=request)
    assert run.error["code"] == "X_LLM_ERROR" and "scripted server error" in run.error["message"]
    told = response_to(request)["payload"]["error"]
    assert told == {"code": "X_LLM_ERROR", "message": LLM_FAILED}
    # The host's own work (no partner) keeps the provider's words for its Director.
    own = bus.send_task("director", "info-gathering-agent", {"store": "x"})
    assert "scripted server error" in response_to(own)["payload"]["error"]["message"]


@pytest.mark.parametrize(
    ("finish_reason", "status", "result"),
    [
        ("length", "partial", {"answer": '{"plan": "send a coupon to ev'}),
        ("content_filter", "error", None),
    ],
)
def test_an_answer_the_model_did_not_finish_is_not_handed_on_as_done(
    registry, director, monkeypatch, finish_reason, status, result
):
    """litellm's real path: an answer cut at the model's output limit, or filtered by its
    provider, is no finished task (spec §18.5): partial or error, and not handed on."""
    cut = text_response('{"plan": "send a coupon to ev', finish_reason=finish_reason)
    with openai_stub([cut]) as (url, _):
        monkeypatch.setenv("OPENAI_API_BASE", url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        info = registry["info"]
        info.model, info.hands_off_to = "openai/stub-model", registry["planning"]
        info.save()
        request, run = send("info-gathering-agent")
    assert (run.status, run.result) == (status, result)
    assert run.error["code"] == "X_LLM_INCOMPLETE"
    assert response_to(request)["status"] == status
    assert not AgentRun.objects.filter(agent__agent_id="planning-agent").exists()


def test_an_agent_disabled_mid_run_stops_before_its_next_llm_turn(registry, director, script):
    """An operator's Disable stops the agent's work at its next step: no further LLM turn
    (its run ended success, and its hand-off was then refused as from an unknown sender)."""
    info = registry["info"]
    info.model = script(
        {
            "info-gathering-agent": [
                {"tool_calls": [{"name": "query_crm", "arguments": {"filter": "rain"}}]},
                {"json": {"analysis": "from a disabled agent"}},
            ]
        }
    )
    info.save()

    def disable(sender, events, **kwargs):  # an operator, while the tool call ran
        if any(e.event_type == "TOOL_EXECUTED" for e in events):
            Agent.objects.filter(agent_id="info-gathering-agent").update(enabled=False)

    audit_recorded.connect(disable, weak=False)
    try:
        request, run = send("info-gathering-agent")
    finally:
        audit_recorded.disconnect(disable)
    assert (run.status, run.steps) == (AgentRun.Status.ERROR, 1)  # no second LLM turn
    assert run.error == {
        "message": "The agent info-gathering-agent was disabled: its run stopped.",
        "code": "X_ACCESS_DENIED",
    }
    assert response_to(request)["status"] == "error"
