"""The dashboard's test data: the `registry` fixture's pools, server and agents, plus runs,
A2A messages, approvals and audit events made by running the real flows (Director → info →
planning → dispatch) on the scripted model, so every page shows what the host really stores."""

import asyncio
import importlib.util
import os
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from a2a import bus
from agents import director as directors
from agents.models import Agent, AgentRun
from mcplets.examples.programmable import stdio_params, write_spec
from passkey.models import Ceremony
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


@pytest.fixture(autouse=True)
def routes(settings):
    settings.ROOT_URLCONF = "tests.dashboard.urls"


@pytest.fixture
def manager(django_user_model):
    """The store manager: approves calls, is not staff."""
    return django_user_model.objects.create_user("manager", "m@example.org", "pw-manager-1")


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_superuser("operator", "op@example.org", STAFF_PASSWORD)


@pytest.fixture
def director(registry):
    director = Agent.objects.create(
        agent_id="director",
        display_name="Director",
        kind=Agent.Kind.DIRECTOR,
        prompt_template="Plan for {{ tomorrow|date:'Y-m-d' }}. Targets: {{ targets|join:', ' }}",
        backoff_seconds=0,
        lock_timeout=30,
    )
    director.targets.add(registry["info"])
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


# --- Chromium (Playwright's sync API, Debian's browser) ---------------------------------------

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LAPTOP = {"width": 1440, "height": 900}
PAGES = ["overview", "mcplets", "agents", "runs", "approvals", "audit", "control"]


@contextmanager
def outside_the_browser_loop():
    """Playwright's sync API leaves its event loop marked as running in this thread; code that
    runs a loop of its own (discovery's anyio.run, async_to_sync) must not see it."""
    loop = asyncio.events._get_running_loop()
    asyncio.events._set_running_loop(None)
    try:
        yield
    finally:
        asyncio.events._set_running_loop(loop)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    if fixturedef.argname in ("browser", "page"):
        return (yield)
    with outside_the_browser_loop():
        return (yield)


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists() or importlib.util.find_spec("playwright") is None:
        reason = "needs /usr/bin/chromium (apt-get install chromium) and the playwright package"
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the browser tests: {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # the ORM, in Playwright's thread
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
            )
            yield chromium
            chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport=LAPTOP)
    context.set_default_timeout(20_000)
    page = context.new_page()
    # Script errors, CSP violations, failed requests (the WSGI live server has no websocket, and
    # the admin's login page asks for a /favicon.ico nobody serves).
    page.problems = []
    page.on("pageerror", lambda error: page.problems.append(str(error)))
    page.on(
        "console",
        lambda m: (
            page.problems.append(m.text)
            if m.type == "error" and not m.text.startswith(("WebSocket", "Failed to load resource"))
            else None
        ),
    )
    page.on(
        "response",
        lambda r: (
            page.problems.append(f"{r.status} {r.url}")
            if r.status >= 400 and not r.url.endswith(("/favicon.ico", "/ws/dashboard/"))
            else None
        ),
    )
    yield page
    context.close()


def sign_in(page, base):
    """The operator, through the admin's login form (where /dashboard/ sends the anonymous)."""
    page.goto(f"{base}/dashboard/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", STAFF_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/dashboard/")


def use_session(page, base, user):
    """Sign `user` in by cookie (the admin login form takes staff only)."""
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": base}])


def screenshot(page, name):
    """With MCPLET_SCREENSHOTS=<dir> (e.g. docs/screenshots), keep a picture of the page."""
    folder = os.environ.get("MCPLET_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"dashboard-{name}.png"), full_page=True)
