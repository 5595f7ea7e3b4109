"""A server's form request during a call, answered in Chromium: the approver's page shows who
asks for which call and the server's message, the form built from the requested schema; the
person's answer reaches the server, and "Cancel" sends a cancel, never an answer."""

import os

import pytest

if not os.environ.get("CI"):  # in CI a missing Playwright fails the run instead
    pytest.importorskip("playwright")
from playwright.sync_api import expect  # noqa: E402

from held.models import Ceremony
from tests.browser import outside_the_browser_loop, use_session
from tests.held import conftest as held_calls
from tests.passkey.test_form_elicitation import Call, elicited, held_form

pytestmark = pytest.mark.django_db(transaction=True)

bistro = held_calls.bistro


def test_the_person_fills_in_the_form_and_the_server_gets_the_answer(
    page, host, approver, asking_server, calls
):
    with outside_the_browser_loop():  # discovery runs a loop of its own
        call = Call(asking_server())
    form = held_form(call)
    use_session(page, host, approver)
    page.goto(host + form.get_absolute_url())

    expect(page.locator("#message")).to_have_text("Who should the restaurant contact?")
    expect(page.locator("#tool")).to_contain_text("book_table")
    expect(page.locator("#agent")).to_contain_text("planning-agent")
    expect(page.locator("#partner")).to_have_text("partner-bot")
    expect(page.get_by_label("Contact e-mail")).to_be_visible()

    page.get_by_label("Contact e-mail").fill("kim@example.kr")
    page.fill("input[name=guests]", "3")
    page.select_option("select[name=seating]", "inside")
    page.check("input[name=vegetarian]")
    page.click("#accept")

    expect(page.locator("#status")).to_contain_text("Sent to the server")
    content = {"email": "kim@example.kr", "guests": 3, "seating": "inside", "vegetarian": True}
    assert call.result() == {"elicited": {"action": "accept", "content": content}}
    assert elicited(calls) == [{"action": "accept", "content": content}]
    assert page.problems == []  # the strict CSP holds


def test_cancel_sends_a_cancel_and_no_answer(page, host, approver, asking_server, calls):
    with outside_the_browser_loop():  # discovery runs a loop of its own
        call = Call(asking_server())
    form = held_form(call)
    use_session(page, host, approver)
    page.goto(host + form.get_absolute_url())
    page.get_by_label("Contact e-mail").fill("not sent")  # invalid, and never sent

    page.click("#cancel")

    expect(page.locator("#status")).to_contain_text("Cancelled")
    assert call.result() == {"elicited": {"action": "cancel"}}
    form.refresh_from_db()
    assert form.status == Ceremony.Status.REJECTED


@pytest.mark.usefixtures("eager")
def test_a_form_asked_before_the_call_answers_is_answered_in_the_browser(
    page, host, approver, bistro, calls
):
    """MCP 2026-07-28: the server answered `input_required` with a form; nothing waits, the
    person's answer goes back with the same call, once, and the server's state."""
    with outside_the_browser_loop():  # discovery runs a loop of its own
        held = held_calls.book(bistro(held_calls.WHICH_TABLE)).ceremony
    use_session(page, host, approver)
    page.goto(host + held.get_absolute_url())

    expect(page.locator("#message")).to_have_text("Which table?")
    expect(page.locator("#partner")).to_have_text("partner-bot")
    assert held.input_round["requestState"] not in page.content()
    page.select_option("select[name=seating]", "terrace")
    page.fill("input[name=guests]", "5")
    page.click("#accept")

    expect(page.locator("#status")).to_contain_text("Sent to the server")
    held.refresh_from_db()
    assert held.status == Ceremony.Status.EXECUTED, held.result
    first, retry = calls("book_table")
    content = {"seating": "terrace", "guests": 5}
    assert retry["inputResponses"] == {"table": {"action": "accept", "content": content}}
    assert page.problems == []  # the strict CSP holds
