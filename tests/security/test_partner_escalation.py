"""Partner escalation through hand-offs and proposed actions (issue 14, reproduction 1).

A partner's task runs inside the partner's grants however far it travels: through 1, 2 and 3
hand-offs, in the LLM's tool calls and in the actions it proposes, and when a held call resumes
after the partner lost its grants. Each attempt is one test: the MCP server's own call log shows
the tool never ran, and the gateway's TOOL_BLOCKED event names the partner and the chain."""

import httpx
import pytest

from a2a import messages
from a2a.models import PartnerKey
from agents.models import Agent
from held.models import Ceremony
from mcplet_host import gateway
from mcplet_host.authority import Authority
from mcplet_host.models import AuditEvent
from tests.security import workflow
from tests.security.workflow import (
    CHAIN,
    PARTNER,
    blocked,
    partner_task,
    run_of,
    wire,
)

# One MCP server for the module; tests/conftest.py's registry and call log point at it.
calls, committed, reference_server, shared = (
    workflow.calls,
    workflow.committed,
    workflow.reference_server,
    workflow.shared,
)

ATTACK_CLASS = "partner escalation"

# The bus and the continuations run eagerly at each commit, captured in the test's transaction
# (no database flush per attempt); the reproduction through the partner API is transactional.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("eager")]

EMAIL = {"to": ["sato@example.jp"], "body": "Free dessert"}
# What the agent at the end of the chain tries, and with which arguments.
MODEL_TOOLS = {"read_site_stats": {}, "fetch_web_content": {"url": "https://w.example/x"}}
PROPOSED = {"send_email": EMAIL, "export_bookings": {}, "prepare_coupon": {}, "post_sns": {}}
OTHER_POOL = {"read_site_stats": "info-pool", "fetch_web_content": "media-pool"}

ATTEMPTS = [
    (hops, via, tool, partner_pools)
    for hops in (1, 2, 3)
    for via, tools in (("tool_calls", MODEL_TOOLS), ("actions", PROPOSED))
    for tool in tools
    # The partner holds nothing, or only the pool the tool is not in.
    for partner_pools in ((), (OTHER_POOL.get(tool, "info-pool"),))
]


@pytest.fixture
def partner(registry):
    partner = registry["partner"]
    partner.callable_agents.set(
        [registry["info"]]
    )  # not the agents after it: the operator's wiring
    return partner


def turns_for(via, tool):
    if via == "tool_calls":
        arguments = MODEL_TOOLS[tool]
        return [
            {"tool_calls": [{"name": tool, "arguments": arguments}]},
            {
                "expect": {"tool_errors": True, "tool_results_contain": ["X_ACCESS_DENIED"]},
                "text": "no",
            },
        ]
    return [
        {"json": {"summary": "one call", "actions": [{"tool": tool, "arguments": PROPOSED[tool]}]}}
    ]


@pytest.mark.parametrize(
    ("hops", "via", "tool", "partner_pools"),
    ATTEMPTS,
    ids=[f"{h}-hop-{v}-{t}-partner-holds-{'+'.join(p) or 'nothing'}" for h, v, t, p in ATTEMPTS],
)
def test_a_partner_task_stays_inside_the_partner_grants(
    registry, partner, script, calls, committed, hops, via, tool, partner_pools
):
    partner.accessible_pools.set([registry[name] for name in partner_pools])
    last = wire(registry, script, turns_for(via, tool), hops)

    with committed():
        partner_task()

    assert calls(tool) == []  # the MCP server's own log: it never ran
    event = blocked(tool)
    assert (event.actor_id, event.details["rule"]) == (last.agent_id, "pool")
    assert f"which is not granted to {PARTNER}" in event.details["message"]
    assert event.details["partner"] == PARTNER and event.details["via"] == CHAIN[:hops]
    assert run_of(last.agent_id).authority == Authority(PARTNER, tuple(CHAIN[:hops]))
    assert not Ceremony.objects.exists()  # refused before any approval was even asked for


# --- the reproduction, through the partner API ---------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_reproduction_1_the_dispatch_agents_llm_after_a_partners_task(
    live_server, registry, partner, script, calls
):
    """A partner with no pools sends a task to info-gathering-agent, which hands off to
    dispatch-agent; dispatch-agent's LLM calls read_site_stats (media-pool). It must not run —
    the pool-less query_crm may — and every event downstream names the partner."""
    info, dispatch = registry["info"], registry["dispatch"]
    model = script(
        {
            "info-gathering-agent": [{"json": {"analysis": "rain"}}],
            "dispatch-agent": [
                {
                    "tool_calls": [
                        {"name": "read_site_stats", "arguments": {}},
                        {"name": "query_crm", "arguments": {"filter": "rain"}},
                    ]
                },
                {"expect": {"tool_results_contain": ["X_ACCESS_DENIED"]}, "json": {"sent": 0}},
            ],
        }
    )
    info.model, info.hands_off_to, dispatch.model = model, dispatch, model
    info.save()
    dispatch.save()
    _, raw = PartnerKey.issue(partner, "tests")
    # What a partner might put in the payload changes nothing: the key says who it is.
    parameters = {"store": "shinjuku", "provenance": {}, "partner": None}
    body = messages.task_request(PARTNER, "info-gathering-agent", parameters)
    response = httpx.post(
        f"{live_server.url}/a2a/tasks",
        json=body,
        headers={"Authorization": f"Bearer {raw}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text

    assert calls("read_site_stats") == [] and len(calls("query_crm")) == 1
    event = blocked("read_site_stats")
    assert event.details["partner"] == PARTNER and event.details["via"] == [info.agent_id]
    assert run_of("dispatch-agent").authority == Authority(PARTNER, (info.agent_id,))
    downstream = AuditEvent.objects.filter(
        actor_id="dispatch-agent", event_type__in=["TOOL_EXECUTED", "agent.run.finished"]
    )
    assert downstream.count() == 2
    assert {e.details["partner"] for e in downstream} == {PARTNER}
    finished = AuditEvent.objects.filter(event_type="agent.run.finished")
    assert {e.actor_id: e.details["partner"] for e in finished} == {
        "info-gathering-agent": PARTNER,
        "dispatch-agent": PARTNER,
    }


# --- a held call resumes inside the grants of the moment ------------------------------------------


@pytest.mark.parametrize("change", ["pool revoked", "partner disabled", "partner deleted"])
def test_a_held_call_is_checked_against_the_partner_again_when_it_resumes(
    registry, partner, script, calls, committed, admin_user, change
):
    partner.accessible_pools.set([registry["media-pool"]])
    wire(registry, script, turns_for("actions", "post_sns"), 2)
    with committed():
        partner_task()
    (ceremony,) = Ceremony.objects.filter(tool_name="post_sns")
    assert ceremony.authority == Authority(PARTNER, tuple(CHAIN[:2]))

    if change == "pool revoked":
        partner.accessible_pools.clear()
    elif change == "partner disabled":
        Agent.objects.filter(pk=partner.pk).update(enabled=False)
    else:
        partner.delete()
    with committed():
        ceremony.approve(admin_user)

    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.FAILED and calls("post_sns") == []
    event = blocked("post_sns")
    assert event.details["partner"] == PARTNER and event.details["ceremony"] == ceremony.token[:8]
    assert event.details["rule"] in {"pool", "agent"}


def test_the_llms_tool_list_is_the_partners_too_after_hand_offs(registry, partner):
    dispatch = registry["dispatch"]
    dispatch.accessible_pools.set([registry["info-pool"], registry["media-pool"]])
    names = lambda authority: {t.name for t in gateway.tools_for(dispatch, authority)}  # noqa: E731
    assert {"read_site_stats", "fetch_web_content"} <= names(Authority().then("director"))
    for hops in (1, 2, 3):
        chain = Authority(PARTNER, tuple(CHAIN[:hops]))
        assert names(chain) & {"read_site_stats", "fetch_web_content"} == set()
        partner.accessible_pools.set([registry["info-pool"]])
        assert "fetch_web_content" in names(chain) and "read_site_stats" not in names(chain)
        partner.accessible_pools.clear()
