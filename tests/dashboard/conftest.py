"""The dashboard's test data: the `registry` fixture's pools, server and agents, plus runs,
A2A messages, approvals and audit events made by running the real flows (Director → info →
planning → dispatch) on the scripted model, so every page shows what the host really stores."""

from contextlib import suppress

import pytest

from a2a import bus
from agents import director as directors
from agents.models import AgentRun
from held.models import Ceremony
from mcplets.examples.programmable import stdio_params, write_spec
from pools.discovery import discover
from pools.mcp_client import ServerUnreachable
from pools.models import McpServer
from tests.conftest import entry

STAFF_PASSWORD = "pw-operator-1"
GUESTS = ["sato@example.jp", "kim@example.kr"]
EMAIL = {"to": GUESTS, "body": "Rain tomorrow? Your dessert is on us."}
INSTRUCTION = {
    "target": "info-gathering-agent",
    "instruction": "Find tomorrow's bookings at risk of cancelling",
    "parameters": {"store": "shinjuku"},
}


def campaign(script, name="campaign"):
    """The reference scenario's happy path, up to the e-mail waiting for the manager."""
    return script(
        {
            "director": [{"json": INSTRUCTION}],
            "info-gathering-agent": [
                {
                    "tool_calls": [
                        {"name": "query_crm", "arguments": {"filter": "bookings tomorrow"}},
                        {
                            "name": "fetch_web_content",
                            "arguments": {"url": "https://weather.example.org/tokyo"},
                        },
                    ]
                },
                {"json": {"analysis": "heavy rain expected", "atRisk": GUESTS}},
            ],
            "planning-agent": [{"json": {"plan": "Offer a free dessert to guests at risk"}}],
            "dispatch-agent": [
                {
                    "json": {
                        "summary": "two e-mails",
                        "actions": [{"tool": "send_email", "arguments": EMAIL, "why": "rain"}],
                    }
                }
            ],
        },
        name=name,
    )


def legacy_server(tmp_path):
    """A server whose tools break the spec's rules, so the MCPlets page shows rejections."""
    spec = tmp_path / "legacy.json"
    untyped = entry("legacy_export")
    del untyped["_meta"]["mcpletType"]
    write_spec(
        spec,
        [
            untyped,
            entry("blast_sms", "action", ("model",)),
            entry("ops_report", pool="ops-pool"),
            entry("list_tables"),
        ],
    )
    command, args = stdio_params(spec)
    server = McpServer.objects.create(
        name="legacy-crm", transport="stdio", command=command, args=args
    )
    discover(server)
    return server


@pytest.fixture
def manager(django_user_model):
    """The store manager: approves calls, is not staff."""
    return django_user_model.objects.create_user("manager", "m@example.org", "pw-manager-1")


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_superuser("operator", "op@example.org", STAFF_PASSWORD)


@pytest.fixture
def director(director):
    """tests/conftest.py's Director, on a schedule (the overview shows it)."""
    director.schedule_cron("0 18 * * *")
    return director


@pytest.fixture
def scenario(registry, director, script, eager, manager, tmp_path):
    """Needs django_db(transaction=True). Three traces: a rejected e-mail (cancelled run), a
    hallucinated tool (failed run), and the campaign waiting for the manager's approval."""
    info, planning, dispatch = registry["info"], registry["planning"], registry["dispatch"]
    partner = registry["partner"]
    partner.callable_agents.add(info)
    partner.accessible_pools.add(registry["info-pool"])
    info.hands_off_to, planning.hands_off_to = planning, dispatch
    planning.result_needs_approval, planning.approval_prompt = True, "Approve the campaign plan"
    legacy_server(tmp_path)
    down = McpServer.objects.create(
        name="weather-api", transport="http", url="http://127.0.0.1:9/mcp"
    )
    with suppress(ServerUnreachable):
        discover(down, timeout=5)

    # 1. A task straight to dispatch; the manager rejects its e-mail.
    model = campaign(script)
    for agent in (director, info, planning, dispatch):
        agent.model = model
        agent.save()
    rejected = bus.send_task("planning-agent", "dispatch-agent", {"plan": "dessert"})
    AgentRun.objects.get(request=rejected).waiting_for.decline(Ceremony.Status.REJECTED, manager)

    # 2. The Director's cycle, with an info agent that names a tool nobody serves.
    info.model = script(
        {
            "director": [{"json": INSTRUCTION}],
            "info-gathering-agent": [{"tool_calls": [{"name": "drop_database", "arguments": {}}]}],
        },
        name="hallucination",
    )
    info.save()
    failed = directors.run_cycle("director")

    # 3. The campaign: the manager approves the plan, the e-mail waits.
    info.model = model
    info.save()
    cycle = directors.run_cycle("director")
    plan = AgentRun.objects.get(agent=planning, context_id=cycle.context_id)
    plan.waiting_for.approve(manager)
    waiting = AgentRun.objects.get(agent=dispatch, context_id=cycle.context_id)
    assert waiting.status == AgentRun.Status.AWAITING_APPROVAL
    return {
        **registry,
        "director": director,
        "manager": manager,
        "rejected": str(rejected.context_id),
        "failed": failed.context_id,
        "campaign": cycle.context_id,
        "waiting": waiting,
    }


PAGES = ["overview", "mcplets", "agents", "runs", "approvals", "audit", "control"]


def sign_in(page, base, username="operator", password=STAFF_PASSWORD):
    """Through the admin's login form, where /dashboard/ sends the anonymous."""
    page.goto(f"{base}/dashboard/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/dashboard/")
