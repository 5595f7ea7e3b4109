"""A wallet's step-up in Chromium: an agent's `aaif.pwma.request` is held; the approver's page
shows the domain in large type and the QR code; the person confirms before the provider's page
opens, approves there, and the wallet's notification sends the same call again; the agent gets
the mandate. A URL on another domain than the server's says so and is never followed unasked."""

import json
import os
from urllib.parse import urlsplit

import pytest

if not os.environ.get("CI"):  # in CI a missing Playwright fails the run instead
    pytest.importorskip("playwright")
from playwright.sync_api import expect  # noqa: E402

from a2a import bus
from agents.models import Agent, AgentRun
from held.models import Ceremony
from mcplet_host.models import AuditEvent
from mcplets.examples.pwma_wallet import serve
from pools.discovery import discover
from pools.models import McpServer
from tests.browser import outside_the_browser_loop, use_session

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

INTENT = {"type": "mandate", "payee": "Shinjuku Bistro", "maxAmount": 120}


def start_run(script, wallet, request_id, then):
    with outside_the_browser_loop():  # discovery and the run's gateway call run a loop
        return _start_run(script, wallet, request_id, then)


def _start_run(script, wallet, request_id, then):
    server = McpServer.objects.create(name="wallet", transport="http", url=f"{wallet}/mcp")
    discover(server)
    Agent.objects.create(agent_id="director", display_name="Director", kind=Agent.Kind.DIRECTOR)
    arguments = {"requestId": request_id, "walletIntent": INTENT}
    model = script(
        {
            "shopping-agent": [
                {"tool_calls": [{"name": "aaif.pwma.request", "arguments": arguments}]},
                then,
            ]
        }
    )
    Agent.objects.create(agent_id="shopping-agent", display_name="Shopping", model=model)
    request = bus.send_task("director", "shopping-agent", {})
    run = AgentRun.objects.get(request=request)
    assert run.status == AgentRun.Status.AWAITING_APPROVAL
    return run, Ceremony.objects.get(kind=Ceremony.Kind.STEP_UP)


def test_the_approver_confirms_the_provider_completes_and_the_agent_gets_the_mandate(
    page, host, approver, script
):
    with serve() as wallet:
        then = {"expect": {"tool_results_contain": ["pwma.mandate"]}, "text": "mandate in hand"}
        run, held = start_run(script, wallet, "req-browser", then)
        use_session(page, host, approver)
        page.goto(host + held.get_absolute_url())

        expect(page.locator("#tool")).to_contain_text("aaif.pwma.request")
        expect(page.locator("#agent")).to_contain_text("shopping-agent")
        expect(page.locator("#message")).to_contain_text("the holder must approve")
        expect(page.locator("#qr-0 svg")).to_be_visible()
        expect(page.locator("#domain-1")).to_have_text(urlsplit(wallet).netloc)  # its port too
        expect(page.locator("#url-1")).to_have_text(held.elicitations[1]["url"])
        expect(page.locator("#elsewhere-1")).to_have_count(0)  # the server's own domain
        expect(page.locator("#go-1")).to_have_count(0)  # no link before the person confirms

        page.click("#confirm-1")
        expect(page.locator("#go-1")).to_have_attribute("href", held.elicitations[1]["url"])
        with page.expect_popup() as opened:
            page.click("#go-1")
        provider = opened.value
        provider.click("#approve")
        expect(provider.locator("#done")).to_be_visible()

        run.refresh_from_db()
        for _ in range(200):  # the notification reaches this process's session, then a task
            if run.is_final:
                break
            page.wait_for_timeout(50)
            run.refresh_from_db()
        assert run.status == AgentRun.Status.SUCCESS and run.result == {"answer": "mandate in hand"}
        tool_message = next(m for m in run.transcript if m["role"] == "tool")
        mandate = json.loads(tool_message["content"])["result"]
        assert mandate["requestId"] == "req-browser"

        page.reload()
        expect(page.locator("#status")).to_contain_text("succeeded")
        assert page.problems == []  # the QR code's SVG lives with the strict CSP

    kinds = list(
        AuditEvent.objects.filter(trace_id=run.context_id)
        .order_by("pk")
        .values_list("event_type", flat=True)
    )
    steps = ["mcplet.stepup.held", "mcplet.stepup.completed", "mcplet.stepup.retried"]
    assert [k for k in kinds if k.startswith("mcplet.stepup")] == steps
    assert kinds.index("mcplet.stepup.retried") < len(kinds) - 1 - kinds[::-1].index(
        "TOOL_EXECUTED"
    )


def test_a_url_on_another_domain_says_so_and_cancel_runs_nothing_more(page, host, approver, script):
    with serve(provider_host="localhost") as wallet:
        then = {"expect": {"tool_results_contain": ["X_APPROVAL_REJECTED"]}, "text": "no mandate"}
        run, held = start_run(script, wallet, "req-elsewhere", then)
        use_session(page, host, approver)
        page.goto(host + held.get_absolute_url())

        port = urlsplit(wallet).port
        expect(page.locator("#domain-1")).to_have_text(f"localhost:{port}")
        expect(page.locator("#elsewhere-1")).to_contain_text(
            f"not the server’s domain (127.0.0.1:{port})"
        )
        expect(page.locator("#go-1")).to_have_count(0)
        assert page.url == host + held.get_absolute_url()  # nothing was followed

        page.click("#cancel")
        expect(page.locator("#status")).to_contain_text("Cancelled")

    run.refresh_from_db()  # the agent is told, and goes on without the mandate
    assert run.status == AgentRun.Status.SUCCESS and run.result == {"answer": "no mandate"}
    assert not AuditEvent.objects.filter(event_type="mcplet.stepup.retried").exists()


def test_the_qr_code_fills_a_phone_and_one_too_long_for_a_qr_code_is_shown_to_copy(
    page, host, approver, script
):
    with serve() as wallet:
        then = {"expect": {"tool_results_contain": ["X_APPROVAL_REJECTED"]}, "text": "no mandate"}
        run, held = start_run(script, wallet, "req-phone", then)
        page.set_viewport_size({"width": 390, "height": 844})
        use_session(page, host, approver)
        page.goto(host + held.get_absolute_url())
        drawn = page.locator("#qr-0 svg").bounding_box()
        assert 300 <= drawn["width"] <= 360 and drawn["width"] == drawn["height"]

        steps = held.elicitations
        steps[0]["qrPayload"] = "x" * 4000  # past what a QR code holds
        Ceremony.objects.filter(pk=held.pk).update(elicitations=steps)
        page.reload()
        expect(page.locator("#qr-0")).to_have_count(0)
        copy = page.locator("#qr-text-0")
        expect(copy).to_have_value("x" * 4000)
        assert copy.bounding_box()["width"] <= 390
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        page.click("#cancel")
        expect(page.locator("#status")).to_contain_text("Cancelled")
        assert page.problems == []


def test_finished_too_early_leads_on_to_the_new_step(page, host, approver, script):
    """Saying "I have finished" before the holder has: the call sent again meets another step,
    and the first step's page leads on to the new one's."""
    with serve() as wallet:
        then = {"expect": {"tool_results_contain": ["X_APPROVAL_REJECTED"]}, "text": "no mandate"}
        run, held = start_run(script, wallet, "req-early", then)
        use_session(page, host, approver)
        page.goto(host + held.get_absolute_url())
        page.click("#finished")
        link = page.locator("#held-again")
        expect(page.locator("#status")).to_contain_text("its server asks for another step")
        newer = Ceremony.objects.filter(kind=Ceremony.Kind.STEP_UP).exclude(pk=held.pk).get()
        expect(link).to_have_attribute("href", newer.get_absolute_url())
        link.click()
        expect(page.locator("#finished")).to_be_visible()  # the new step, waiting
        assert page.url == host + newer.get_absolute_url()
        assert page.problems == []
