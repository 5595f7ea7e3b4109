"""Partner API rules that one-line breaks used to slip past (issue 14), and its refusals proved
from the MCP server's own call log: each refused task goes to an agent whose model would call
a tool at once, so had anything run, the log would show it."""

import pytest
from django.test import Client

from a2a import messages
from a2a.models import A2AMessage, PartnerKey
from agents.models import Agent, AgentRun
from mcplet_host.models import AuditEvent
from tests.agents.openai_stub import Canned, openai_stub

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

CRM = {"name": "query_crm", "arguments": {"filter": "rain"}}


@pytest.fixture
def partner(registry, script):
    """partner-bot may call the info and dispatch agents (not planning) and holds info-pool;
    every internal agent's model calls query_crm (pool-less) first."""
    partner = registry["partner"]
    partner.callable_agents.set([registry["info"], registry["dispatch"]])
    partner.accessible_pools.set([registry["info-pool"]])
    turns = [{"tool_calls": [CRM]}, {"json": {"analysis": "rain"}}]
    model = script({a: turns for a in ("info-gathering-agent", "planning-agent", "dispatch-agent")})
    Agent.objects.filter(kind=Agent.Kind.INTERNAL).update(model=model)
    return partner


def api(agent):
    _, raw = PartnerKey.issue(agent, "tests")
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


def send(client, body):
    return client.post("/a2a/tasks", body, content_type="application/json")


def task(recipient="info-gathering-agent", parameters=None, sender="partner-bot"):
    return messages.task_request(sender, recipient, parameters or {"store": "shinjuku"})


def test_the_control_a_task_inside_the_grants_runs_its_tool(partner, calls):
    """What every refusal below is measured against: the same set-up, allowed, does call."""
    response = send(api(partner), task())
    assert response.status_code == 200 and response.json()["status"] == "success"
    assert [c["name"] for c in calls()] == ["query_crm"]


# --- a disabled partner's key -----------------------------------------------------------------


def test_a_disabled_partners_key_no_longer_authenticates(partner, calls):
    client = api(partner)
    assert client.get("/a2a/agents").status_code == 200
    partner.enabled = False
    partner.save()
    for response in (send(client, task()), client.get("/a2a/agents")):
        assert response.status_code == 401
        assert response.json()["error"] == {
            "code": "AUTH_FAILED",
            "message": "This partner is disabled.",
        }
    assert not A2AMessage.objects.exists() and not AgentRun.objects.exists() and calls() == []
    event = AuditEvent.objects.filter(event_type="a2a.partner.request").order_by("-seq").first()
    assert (event.result, event.details["status"]) == ("BLOCKED", 401)


# --- 403 outside the grants ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (task(sender="info-gathering-agent"), "senderId must be your agentId ('partner-bot')."),
        (task(recipient="planning-agent"), "You may not send tasks to 'planning-agent'."),
        (
            task(parameters={"pools": ["media-pool"]}),
            "These pools are outside your grants: media-pool.",
        ),
        (
            task(parameters={"tools": ["read_site_stats"]}),
            "These tools are outside your grants: read_site_stats.",
        ),
        (
            task(parameters={"tools": ["send_email"]}),
            "These tools are outside your grants: send_email.",
        ),
    ],
)
def test_a_task_outside_the_grants_is_403_and_nothing_runs(partner, calls, body, says):
    response = send(api(partner), body)
    assert response.status_code == 403
    assert response.json()["error"] == {"code": "X_FORBIDDEN", "message": says}
    assert not AgentRun.objects.exists() and calls() == []
    event = AuditEvent.objects.filter(event_type="a2a.partner.request").latest("seq")
    assert (event.actor_id, event.result, event.details["status"]) == (
        "partner-bot",
        "BLOCKED",
        403,
    )


@pytest.mark.parametrize(
    ("partner_pools", "asked"),
    [
        (["info-pool", "media-pool"], "media-pool"),  # the partner's, not the recipient's
        (["media-pool"], "info-pool"),  # the recipient's, not the partner's
    ],
)
def test_parameters_pools_must_be_held_by_partner_and_recipient(
    partner, registry, calls, partner_pools, asked
):
    partner.accessible_pools.set([registry[name] for name in partner_pools])
    response = send(api(partner), task(parameters={"pools": [asked]}))
    assert response.status_code == 403
    assert response.json()["error"]["message"] == f"These pools are outside your grants: {asked}."
    assert not AgentRun.objects.exists() and calls() == []


@pytest.mark.parametrize(
    ("partner_pools", "asked"),
    [
        (["media-pool"], "fetch_web_content"),  # info-pool: the recipient's, not the partner's
        (["info-pool", "media-pool"], "read_site_stats"),  # the partner's, not the recipient's
    ],
)
def test_parameters_tools_must_be_inside_partner_and_recipient_grants(
    partner, registry, calls, partner_pools, asked
):
    """The recipient's grants alone do not decide: a partner names no tool it could not call."""
    partner.accessible_pools.set([registry[name] for name in partner_pools])
    response = send(api(partner), task(parameters={"tools": [asked]}))
    assert response.status_code == 403
    assert response.json()["error"]["message"] == f"These tools are outside your grants: {asked}."
    assert not AgentRun.objects.exists() and calls() == []


# --- another partner's messageId ------------------------------------------------------------------


def test_another_partners_message_id_is_not_their_task(partner, registry, calls):
    mine = task()
    first = send(api(partner), mine)
    assert first.status_code == 200 and first.json()["payload"]["result"] == {"analysis": "rain"}
    other = Agent.objects.create(agent_id="other-bot", display_name="Other", kind="external")
    other.callable_agents.set([registry["info"]])
    other.accessible_pools.set([registry["info-pool"]])
    theirs = {**task(sender="other-bot"), "messageId": mine["messageId"]}

    response = send(api(other), theirs)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "NOT_FOUND"
    assert "rain" not in response.content.decode() and mine["contextId"] not in str(response.json())
    # Nothing new ran, nothing was stored for the other partner.
    assert AgentRun.objects.count() == 1 and len(calls()) == 1
    assert not A2AMessage.objects.filter(sender_id="other-bot").exists()
    assert not AgentRun.objects.filter(provenance__partner="other-bot").exists()


# --- the LLM is offered the partner's share of the tools --------------------------------------


def test_the_model_on_a_partners_task_is_offered_only_tools_inside_both_grants(
    partner, registry, calls, monkeypatch
):
    """Seen from the model's side (an OpenAI-compatible server): the tools it is offered."""
    partner.accessible_pools.clear()  # the info agent holds info-pool; the partner nothing

    def answer(body):
        return Canned(
            200,
            {
                "id": "chatcmpl-partner",
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": "stub",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": '{"analysis": "dry"}'},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            },
        )

    with openai_stub(answer) as (url, requests):
        monkeypatch.setenv("OPENAI_API_BASE", url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        Agent.objects.filter(agent_id="info-gathering-agent").update(model="openai/stub-model")
        response = send(api(partner), task())
        assert response.status_code == 200, response.content
        offered = [sorted(t["function"]["name"] for t in r["json"]["tools"]) for r in requests]
    assert offered == [["approve_plan", "broken_stats", "query_crm"]]
    assert calls() == []
