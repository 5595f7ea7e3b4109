"""The dashboard in Chromium on pytest-django's live server (WSGI: pages only, no websocket —
the live updates are in test_live_browser.py): each page renders the scenario within its CSP,
a step of the sequence diagram opens its payload, and only staff get in."""

import pytest
from playwright.sync_api import expect

from tests.browser import use_session
from tests.dashboard.conftest import PAGES, sign_in
from tests.pools import plain_server

pytestmark = pytest.mark.django_db(transaction=True)

HEADINGS = {
    "overview": ["MCP servers", "Runs in progress", "Pending approvals", "Director schedules"],
    "mcplets": ["MCP servers", "Tools"],
    "agents": ["Pool grants", "What each agent's LLM is offered"],
    "runs": ["In progress", "Traces"],
    "approvals": ["Pending", "History"],
    "audit": [],
    "control": ["Directors", "Runs in progress", "Agents", "MCP servers"],
}
SEEN = {
    "overview": ["weather-api", "ConnectError", "send_email", "has no turn 2", "At 06:00 PM"],
    "mcplets": ["it declares no _meta.mcpletType", "ops-pool (unknown)", "Discover now"],
    "agents": ["fetch_web_content", "offered no tools", "on info-gathering-agent"],
    "runs": ["Find tomorrow's bookings at risk of cancelling", "awaiting approval"],
    "approvals": ["sato@example.jp", "X_APPROVAL_REJECTED", "manager", "approved"],
    "audit": ["Chain intact", "TOOL_BLOCKED", "PERMISSION_GRANTED", "Export JSON lines"],
    "control": ["Run Director now", "Pause schedule", "Cancel run"],
}


def test_each_page_renders_the_scenario(page, live_server, scenario, staff):
    base = live_server.url
    sign_in(page, base)
    for name in PAGES:
        page.goto(f"{base}/dashboard/{'' if name == 'overview' else name + '/'}")
        main = page.locator("main")
        for heading in HEADINGS[name]:
            expect(main.get_by_role("heading", name=heading, exact=False).first).to_be_visible()
        for words in SEEN[name]:
            expect(main).to_contain_text(words)
    assert page.problems == []


@pytest.fixture
def plain():
    return plain_server.discovered()  # a fixture: discovery runs outside Playwright's loop


def test_a_server_whose_tools_are_all_rejected_is_a_warning(page, live_server, staff, plain):
    """A plain MCP server: a warning badge (not a green "Connected") with the reasons and a
    link to the author's guide, on the dashboard and in admin."""
    base, warning = live_server.url, "Connected: every tool rejected"
    sign_in(page, base)
    page.goto(f"{base}/dashboard/control/")
    expect(page.locator("main tr", has_text="plain").locator(".badge").first).to_have_text(warning)
    for path in ("/dashboard/", "/dashboard/mcplets/"):
        page.goto(f"{base}{path}")
        row = page.locator("main table").first.locator("tbody tr", has_text="plain")
        badge = row.locator(".badge[data-status=warning]")
        expect(badge).to_have_text(warning)
        assert badge.evaluate("b => getComputedStyle(b).color") != "rgb(23, 128, 61)"  # not --ok
        expect(row).to_contain_text("all 2 tools rejected")
        expect(row).to_contain_text("it declares no _meta.mcpletType")
        expect(row).to_contain_text("2026-07-28")  # the MCP revision agreed with it
    expect(row).to_contain_text("python -m mcplets.adapt --suggest -- COMMAND")
    row.get_by_role("link", name="Writing an MCPlet").click()
    expect(page.get_by_role("heading", name="When the host rejects a tool")).to_be_visible()
    adapter = page.get_by_role("heading", name="Connecting an MCP server that is not an MCPlet")
    expect(adapter).to_be_visible()
    expect(page.locator("article.guide pre").first).to_contain_text("MCPServer(")

    page.goto(f"{base}/admin/pools/mcpserver/")
    row = page.locator("#result_list tbody tr", has_text="plain")
    expect(row).to_contain_text(warning)
    expect(row).to_contain_text("Every tool it lists was rejected (2)")
    row.get_by_role("link", name="plain").click()
    expect(page.locator(".field-status_badge")).to_contain_text(warning)
    expect(page.locator(".field-protocol_version")).to_contain_text("2026-07-28")
    rejections = page.locator(".field-rejections")
    expect(rejections).to_contain_text("it declares no _meta.mcpletType")
    expect(rejections).to_contain_text("put the MCPlet adapter in front of it")
    expect(page.locator("input[name=_save]")).to_be_visible()
    rejections.get_by_role("link", name="Writing an MCPlet").click()
    expect(page).to_have_url(f"{base}/dashboard/mcplets/writing-an-mcplet/")
    assert page.problems == []


def test_a_step_of_the_sequence_opens_its_payload(page, live_server, scenario, staff):
    sign_in(page, live_server.url)
    page.goto(f"{live_server.url}/dashboard/runs/{scenario['campaign']}/")
    diagram = page.locator("svg.sequence")
    expect(diagram).to_contain_text("info-gathering-agent")
    expect(diagram).to_contain_text("people")
    payload = page.locator("details", has_text="query_crm").first
    expect(payload).not_to_have_attribute("open", "")
    diagram.locator("a.step", has_text="query_crm").click()
    expect(payload).to_have_attribute("open", "")
    expect(payload.locator("pre")).to_contain_text('"filter": "bookings tomorrow"')
    expect(payload.locator("pre")).to_contain_text('"toolId": "query_crm"')
    assert page.problems == []


def test_the_filters_narrow_the_audit_log(page, live_server, scenario, staff):
    sign_in(page, live_server.url)
    page.goto(f"{live_server.url}/dashboard/audit/")
    page.fill("input[name=event_type]", "TOOL_BLOCKED")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("table.audit tbody tr")
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text("drop_database")


def test_a_non_staff_user_is_refused(page, live_server, manager):
    use_session(page, live_server.url, manager)
    response = page.goto(f"{live_server.url}/dashboard/")
    assert response.status == 403
    expect(page.locator("h1")).to_have_text("The dashboard is for staff")
    expect(page.locator("body")).not_to_contain_text("MCP servers")


def test_the_anonymous_are_asked_to_sign_in(page, live_server):
    page.goto(f"{live_server.url}/dashboard/approvals/")
    expect(page).to_have_url(f"{live_server.url}/admin/login/?next=/dashboard/approvals/")


def test_the_tools_are_found_by_name_and_a_long_name_wraps(page, live_server, staff):
    from pools.models import Mcplet, McpServer

    server = McpServer.objects.create(name="big", transport="http", url="http://big.example/mcp")
    long_name = "x" * 200  # a hostile server's, kept cut to its column
    Mcplet.objects.bulk_create(
        [Mcplet(server=server, name=f"stock_{i:03}", status="accepted") for i in range(120)]
        + [Mcplet(server=server, name=long_name, status="rejected", rejection_reason="y" * 500)]
    )
    base = live_server.url
    page.set_viewport_size({"width": 1280, "height": 900})
    sign_in(page, base)
    page.goto(f"{base}/dashboard/mcplets/?status=rejected")
    expect(page.locator("table.mcplets")).to_contain_text(long_name)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280

    page.fill("input[name=name]", "STOCK_11")  # a part of a name, in any case
    page.click("form.filters button")
    rows = page.locator("table.mcplets tbody tr")
    expect(rows).to_have_count(0)  # the status filter still holds: none is rejected
    page.select_option("select[name=status]", "")
    page.click("form.filters button")
    expect(rows).to_have_count(10)  # stock_110 … stock_119
    expect(rows.first).to_contain_text("stock_110")
    assert page.problems == []
