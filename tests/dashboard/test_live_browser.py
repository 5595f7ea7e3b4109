"""The dashboard live, in Chromium, served as in production: daphne serving mcplet_host.asgi
(pages and websocket) and a real Celery worker, both on the test database and the real Redis.
pytest-django's live_server is WSGI only, hence the processes. (Every page live with the
reference scenario's data: tests/e2e/test_reference_browser.py.)"""

import copy
import os
import uuid
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import expect

from agents.models import Agent
from mcplet_host import audit
from mcplet_host.models import AuditEvent
from tests import processes
from tests.browser import new_page, outside_the_browser_loop
from tests.dashboard.conftest import sign_in
from tests.processes import celery_worker, daphne

# Scripts in a folder the module's host processes know from the start.
script, scripts = processes.script, processes.scripts

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]
expect.set_options(timeout=30_000)  # a worker's cycle, not a page's render

NAMESPACE = f"dashboard-live-{os.getpid()}"
TOKYO = "Asia/Tokyo"  # nine hours from the server's UTC


def host_environment(scripts):
    return {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "MCPLET_TEST_NAMESPACE": NAMESPACE,
        "MCPLET_SCRIPT_DIRS": str(scripts),
        "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
    }


@pytest.fixture(scope="module")
def asgi_host(django_db_setup, django_db_blocker, scripts, tmp_path_factory):
    log = tmp_path_factory.mktemp("daphne") / "daphne.log"
    with django_db_blocker.unblock(), daphne(log, **host_environment(scripts)) as url:
        yield url


@pytest.fixture(scope="module")
def worker(django_db_setup, django_db_blocker, scripts, tmp_path_factory):
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    with django_db_blocker.unblock(), celery_worker(log, **host_environment(scripts)) as process:
        yield process


def evening_director(model, target):
    director = Agent.objects.create(
        agent_id="evening-director",
        display_name="Evening Director",
        kind=Agent.Kind.DIRECTOR,
        prompt_template="Targets: {{ targets|join:', ' }}",
        model=model,
        backoff_seconds=0,
    )
    director.targets.add(target)


def run_row(page, agent):
    return page.locator('[data-live="runs"] tr', has_text=agent)


def test_a_run_started_from_run_director_now_appears_and_progresses_live(
    browser, asgi_host, worker, registry, script, staff
):
    info, dispatch = registry["info"], registry["dispatch"]
    model = script(
        {
            "evening-director": [
                {
                    "delay": 1,  # the answer to the click is seen before the cycle's outcome
                    "json": {
                        "target": "info-gathering-agent",
                        "instruction": "Find tomorrow's bookings at risk of cancelling",
                    },
                }
            ],
            "info-gathering-agent": [
                # Slow enough to be seen running.
                {"delay": 2, "tool_calls": [{"name": "query_crm", "arguments": {"filter": "x"}}]},
                {"json": {"atRisk": ["sato@example.jp"]}},
            ],
            "dispatch-agent": [
                {
                    "json": {
                        "actions": [
                            {
                                "tool": "send_email",
                                "arguments": {"to": ["sato@example.jp"], "body": "Dessert?"},
                            }
                        ]
                    }
                }
            ],
        }
    )
    evening_director(model, info)
    info.model, info.hands_off_to = model, dispatch
    info.save()
    dispatch.model = model
    dispatch.save()

    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.set_default_timeout(30_000)
    watcher, operator = context.new_page(), context.new_page()
    sign_in(watcher, asgi_host)
    expect(watcher.locator("#live")).to_have_attribute("data-state", "live")
    watcher.evaluate("window.notReloaded = true")

    operator.goto(f"{asgi_host}/dashboard/control/")
    expect(operator.locator("#live")).to_have_attribute("data-state", "live")
    operator.get_by_role("button", name="Run Director now").click()
    result = operator.locator('[data-director-result="evening-director"]')
    expect(result).to_contain_text("queued")  # the answer to the POST, in place
    expect(result.locator(".badge")).to_have_text("ran")  # the cycle's outcome, when it arrives

    # The overview, untouched since it loaded, follows the runs as they progress.
    expect(run_row(watcher, "info-gathering-agent")).to_contain_text("Running")
    expect(run_row(watcher, "info-gathering-agent")).to_contain_text("Success")
    expect(run_row(watcher, "dispatch-agent")).to_contain_text("awaiting approval")
    approvals = watcher.locator('[data-live="approvals"] tr', has_text="send_email")
    expect(approvals).to_contain_text("waiting for approval")
    tiles = watcher.get_by_label("At a glance")  # the counts follow the rows
    expect(tiles).to_contain_text("1 pending approval")
    expect(tiles).to_contain_text("1 run in progress")
    audit = watcher.locator('[data-live="audit"]')
    expect(audit).to_contain_text("director.cycle.ran")
    expect(audit).to_contain_text("dashboard.run_director")

    # Cancel the waiting run from the row that arrived live on the Control page.
    operator.once("dialog", lambda dialog: dialog.accept())
    run_row(operator, "dispatch-agent").get_by_role("button", name="Cancel run").click()
    expect(operator.locator(".messages")).to_contain_text("cancelled")
    expect(run_row(watcher, "dispatch-agent")).to_contain_text("Cancelled")
    expect(approvals).to_contain_text("Rejected")
    expect(tiles).to_contain_text("0 pending approvals")
    expect(tiles).to_contain_text("0 runs in progress")
    expect(audit).to_contain_text("dashboard.cancel_run")
    assert watcher.evaluate("window.notReloaded") is True
    context.close()


@pytest.fixture
def tool_call(settings):
    """Audit a tool call from this process, published where the test's daphne listens."""
    layers = copy.deepcopy(settings.CHANNEL_LAYERS)
    layers["default"]["CONFIG"]["prefix"] = f"mcplet:channels:{NAMESPACE}"
    settings.CHANNEL_LAYERS = layers

    def record(tool, trace, event_type=AuditEvent.EventType.TOOL_EXECUTED):
        with outside_the_browser_loop():  # the live event goes out through async_to_sync
            audit.record(
                event_type,
                actor_type=audit.ActorType.AGENT,
                actor_id="info-gathering-agent",
                target_server="restaurant-crm",
                target_tool=tool,
                result=audit.SUCCESS,
                trace_id=trace,
                details={"duration_ms": 12.5},
            )

    return record


def test_a_trace_redraws_itself_as_its_steps_arrive(page, asgi_host, staff, tool_call):
    """The sequence diagram is drawn by the server: the page fetches itself again and swaps the
    diagram and the steps in place, keeping the payloads the operator opened."""
    trace = str(uuid.uuid4())
    tool_call("query_crm", trace)
    sign_in(page, asgi_host)
    page.goto(f"{asgi_host}/dashboard/runs/{trace}/")
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    page.evaluate("window.notReloaded = true")
    page.locator("#step-1 summary").click()  # the operator reads the first payload

    tool_call("query_erp", trace)
    expect(page.locator("svg.sequence")).to_contain_text("query_erp")
    expect(page.locator("#step-2")).to_contain_text("query_erp")
    expect(page.locator("#step-1")).to_have_attribute("open", "")
    assert page.evaluate("window.notReloaded") is True
    assert page.problems == []


def test_a_filtered_audit_log_shows_new_matching_events_live(browser, asgi_host, staff, tool_call):
    """In the reader's time zone, as the rows the page came with: the server writes UTC."""
    context = browser.new_context(viewport={"width": 1440, "height": 900}, timezone_id=TOKYO)
    context.set_default_timeout(30_000)
    page = new_page(context)
    trace = str(uuid.uuid4())
    tool_call("query_crm", trace)
    sign_in(page, asgi_host)
    page.goto(f"{asgi_host}/dashboard/audit/?tool=query_hr")
    expect(page.locator("main")).to_contain_text("No event matches these filters.")
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    page.evaluate("window.notReloaded = true")

    tool_call("query_erp", trace)  # does not match: nothing changes
    tool_call("query_hr", trace)
    rows = page.locator("table.audit tbody tr")
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text("query_hr")
    assert page.evaluate("window.notReloaded") is True
    shown = rows.locator("time")
    instant = datetime.fromisoformat(shown.get_attribute("datetime"))
    local = instant.astimezone(ZoneInfo(TOKYO)).strftime("%Y-%m-%d %H:%M:%S")
    expect(shown).to_have_text(local)
    assert page.problems == []
    context.close()


def test_the_cycles_outcome_is_not_hidden_by_a_late_answer_to_the_click(
    browser, asgi_host, worker, registry, script, staff
):
    """The cycle may end, and its outcome reach the page, before the answer to "Run Director
    now" does (a quick cycle, a slow network): the late answer must not put "queued" back."""
    model = script({"evening-director": [{"json": {"target": "no-one", "instruction": "Wait"}}]})
    evening_director(model, registry["info"])
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.set_default_timeout(30_000)
    operator = context.new_page()
    sign_in(operator, asgi_host)
    held = []  # the answer to the click, held back until the cycle's outcome is shown

    def hold(route):
        held.append((route, route.fetch()))

    operator.route("**/dashboard/control/directors/*/run/", hold)
    operator.goto(f"{asgi_host}/dashboard/control/")
    expect(operator.locator("#live")).to_have_attribute("data-state", "live")
    operator.get_by_role("button", name="Run Director now").click()
    result = operator.locator('[data-director-result="evening-director"]')
    expect(result.locator(".badge")).to_have_text("skipped")  # the outcome, live
    for _ in range(100):  # the handler keeps the answer once the server gave it
        if held:
            break
        operator.wait_for_timeout(100)
    [(route, answer)] = held
    route.fulfill(response=answer)
    # The button comes back once the answer's handler has run.
    expect(operator.get_by_role("button", name="Run Director now")).to_be_enabled()
    expect(result.locator(".badge")).to_have_text("skipped")
    assert "queued" not in result.inner_text()
    context.close()
