"""An operator turns an agent to discovery in admin (Chromium); its model finds a tool and calls
it; the dashboard shows the agent's mode and, on the run's trace, what it found."""

import pytest
from playwright.sync_api import expect

from a2a import bus
from agents.models import Agent, AgentRun
from tests.browser import use_session
from tests.e2e.test_admin_browser import fill, open_page, url
from tests.e2e.test_config_audit_browser import save

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]


def discover(query):
    return {"name": "mgp_tools_discover", "arguments": {"query": query}}


def test_an_operator_sets_discovery_and_sees_what_was_found(
    page,
    live_server,
    admin_user,
    workspace,
    script,
    calls,
):
    base, assistant = live_server.url, workspace["assistant"]
    director = Agent.objects.create(agent_id="director", display_name="D", kind="director")
    director.targets.add(assistant)
    use_session(page, base, admin_user)

    open_page(page, url(base, Agent, "change", assistant.pk))
    fill(page, {"tool_mode": "pinned tools and discovery (L3)", "pinned_tools": '["get_weather"]'})
    save(page)
    assistant.refresh_from_db()
    assert (assistant.tool_mode, assistant.pinned_tools) == ("hybrid", ["get_weather"])

    open_page(page, base + "/dashboard/agents/")
    mode = page.locator("#agent-assistant .tool-mode")
    expect(mode).to_contain_text("pinned tools and discovery (L3)")
    expect(mode).to_contain_text("the 5 tools it may call")
    expect(page.locator("#agent-assistant table.tools")).to_contain_text("get_weather")
    expect(page.locator("#agent-assistant table.tools")).not_to_contain_text("find_customer")

    assistant.model = script(
        {
            "assistant": [
                {"tool_calls": [{"name": "mgp_tools_discover", "arguments": {"query": "顧客"}}]},
                {
                    "tool_calls": [
                        {"name": "mgp_tools_discover", "arguments": {"query": "customer"}}
                    ]
                },
                {
                    "expect": {"tool_results_contain": ["find_customer"]},
                    "tool_calls": [
                        {"name": "find_customer", "arguments": {"email": "hanako@example.jp"}}
                    ],
                },
                {"text": "Found her."},
            ]
        }
    )
    assistant.save()
    run = AgentRun.objects.get(request=bus.send_task("director", "assistant", {"ask": "who"}))
    assert run.status == AgentRun.Status.SUCCESS, run.error
    assert [c["name"] for c in calls()] == ["find_customer"]

    open_page(page, f"{base}/dashboard/runs/{run.context_id}/")
    expect(page.locator(f"#discovered-{run.pk}")).to_contain_text("find_customer")
