"""Plan §9: the information agent reaches only info-pool + pool-less MCPlets, the planning
agent only pool-less ones, the dispatch agent only media-pool + pool-less ones — in the LLM's
tool list and at the gateway, where a call outside the grants is refused before anything runs."""

import pytest

from held.models import Ceremony
from mcplet_host import gateway
from mcplet_host.models import AuditEvent

pytestmark = pytest.mark.django_db

POOL_LESS = {"query_crm", "query_erp", "query_hr"}
ARGUMENTS = {
    "read_site_stats": {"days": 7},
    "send_email": {"to": ["sato.hanako@example.jp"], "subject": "明日", "body": "雨です"},
    "post_sns": {"text": "明日は雨です"},
    "fetch_web_content": {"url": "http://127.0.0.1:5100/weather/forecast?date=tomorrow"},
    "call_external_api": {"source": "supplier_stock"},
    "query_crm": {"query": "customers", "filter": "rain_cancel_tendency"},
    "query_erp": {"item": "dessert"},
    "query_hr": {"date": "tomorrow"},
}
APP_ONLY = {"send_email", "post_sns"}
# agent → the MCPlets its grants reach (plan §5)
REACH = {
    "info-gathering-agent": POOL_LESS | {"fetch_web_content", "call_external_api"},
    "planning-agent": POOL_LESS,
    "dispatch-agent": POOL_LESS | {"read_site_stats", "send_email", "post_sns"},
}


@pytest.mark.parametrize("agent_id", REACH)
def test_the_llm_sees_only_granted_model_visible_tools(scenario, agent_id):
    names = {t.name for t in gateway.tools_for(scenario[agent_id])}
    assert names == REACH[agent_id] - APP_ONLY


@pytest.mark.parametrize(
    "agent_id, tool",
    [(a, t) for a, reach in REACH.items() for t in sorted(set(ARGUMENTS) - reach)],
)
def test_a_tool_outside_the_grants_is_refused(scenario, agent_id, tool):
    surface = "app" if tool in APP_ONLY else "model"
    outcome = gateway.call_tool(scenario[agent_id], tool, ARGUMENTS[tool], surface, "ctx-grants")
    assert outcome.status == "refused"
    assert outcome.envelope["error"]["code"] == "X_ACCESS_DENIED"
    assert "not granted" in outcome.envelope["error"]["message"]
    assert not Ceremony.objects.exists()
    event = AuditEvent.objects.get(event_type="TOOL_BLOCKED")
    assert event.target_tool == tool and event.details["rule"] == "pool"


def test_app_only_actions_are_refused_to_the_llm_and_held_for_the_host(scenario):
    dispatch = scenario["dispatch-agent"]
    for tool in sorted(APP_ONLY):
        refused = gateway.call_tool(dispatch, tool, ARGUMENTS[tool], "model")
        assert refused.envelope["error"]["code"] == "X_ACCESS_DENIED"
        held = gateway.call_tool(dispatch, tool, ARGUMENTS[tool], "app", "ctx-held")
        assert held.status == "pending"
        assert held.ceremony.enforcement == "strict"
    prompts = set(Ceremony.objects.values_list("prompt_message", flat=True))
    assert "メール送信を承認してください" in prompts


@pytest.mark.django_db(transaction=True)
def test_a_granted_read_runs_over_stdio_against_the_backend(scenario):
    info = scenario["info-gathering-agent"]
    outcome = gateway.call_tool(info, "query_crm", ARGUMENTS["query_crm"], "model", "ctx-read")
    assert outcome.status == "executed", outcome.envelope
    result = outcome.envelope["result"]
    assert result["count"] == 15 and result["filter"] == "rain_cancel_tendency"
    assert outcome.envelope["_meta"]["toolId"] == "query_crm"
