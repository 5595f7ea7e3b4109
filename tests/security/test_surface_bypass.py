"""Surface bypass: app-only tools asked for on the model surface (and model-only ones on the
app surface) under every spelling of a surface, by an agent holding every pool; and the LLM's
tool list never offers an app-only tool."""

import pytest

from mcplet_host import gateway
from mcplet_host.authority import HOST, Authority

pytestmark = pytest.mark.django_db

EMAIL = {"to": ["a@example.org"], "body": "hi"}
NOT_APP = ["model", "Model", "MODEL", " app", "app ", "App", "APP", "\u0430pp", "app\x00", "ａpp"]
NOT_MODEL = ["app", "Model", "model ", "\tmodel", "mod\u0435l", "model\x00", "ｍodel"]
NEITHER = ["", "*", "any", "model,app", "app;model", "both", None, ["app"], {"app": True}, 0]


@pytest.fixture
def everything(world):
    """An agent holding every pool: only the surface stands in the way."""
    world.dispatch.accessible_pools.add(*world.pools.values())
    return world.dispatch


def test_app_only_tools_off_the_app_surface(everything, attempts):
    for tool, arguments in (("app_only_lookup", {}), ("send_email", EMAIL)):
        for surface in NOT_APP + NEITHER:
            with attempts.refused(f"{tool} on {surface!r}", event_type="TOOL_BLOCKED"):
                outcome = gateway.call_tool(everything, tool, arguments, surface)
                assert outcome.status == "refused" and outcome.ceremony is None


def test_model_only_tools_off_the_model_surface(everything, attempts):
    for tool, arguments in (("query_crm", {"filter": "x"}), ("read_site_stats", {})):
        for surface in NOT_MODEL + NEITHER:
            with attempts.refused(f"{tool} on {surface!r}", event_type="TOOL_BLOCKED"):
                assert gateway.call_tool(everything, tool, arguments, surface).status == "refused"


def test_the_llm_is_never_offered_an_app_only_tool(world, everything):
    for agent in (world.info, world.planning, everything):
        for authority in (HOST, Authority.of_partner(world.partner.agent_id)):
            offered = {t.name for t in gateway.tools_for(agent, authority)}
            assert not offered & {"app_only_lookup", "send_email"}
