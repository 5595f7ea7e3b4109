"""An operator registers a remote A2A agent in Chromium: its card fetched from the a2a-sdk's own
server (tests/a2a_sdk/server.py) when saved and shown, refreshed by an action, its credentials
sealed and never shown again; a card that cannot be had is a form error."""

import pytest
from django.db import connection
from playwright.sync_api import expect

from agents.models import Agent
from tests.a2a_sdk import sdk
from tests.browser import use_session
from tests.e2e.test_admin_browser import fill, open_page, url
from tests.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "remote-secret-5c1d"


@pytest.fixture(scope="module")
def peer():
    with sdk.server(TOKEN) as base:
        yield base


def test_an_operator_registers_a_remote_agent_in_chromium(page, live_server, admin_user, peer):
    base = live_server.url
    use_session(page, base, admin_user)
    open_page(page, url(base, Agent, "add"))
    fill(
        page,
        {
            "agent_id": "weather-oracle",
            "display_name": "Oracle",
            "kind": "remote A2A agent",
            "card_url": f"http://127.0.0.1:{free_port()}/",
        },
    )
    page.click("input[name=_save]")  # nothing listens there: a form error, not a 500
    expect(page.locator(".field-card_url .errorlist")).to_contain_text("cannot be reached")

    fill(page, {"card_url": peer, "credentials": f"Authorization: Bearer {TOKEN}"})
    page.click("input[name=_save]")
    expect(page.locator(".messagelist .success")).to_contain_text("weather-oracle")
    oracle = Agent.objects.get(agent_id="weather-oracle")
    assert oracle.remote_card["name"] == "Weather oracle" and oracle.card_fetched_at
    with connection.cursor() as cursor:  # sealed in the database
        cursor.execute("SELECT credentials FROM agents_agent WHERE id = %s", [oracle.pk])
        assert TOKEN not in cursor.fetchone()[0]
    assert oracle.credentials == {"Authorization": f"Bearer {TOKEN}"}

    open_page(page, url(base, Agent, "change", oracle.pk))
    expect(page.locator(".field-remote_card_json")).to_contain_text("Weather oracle")
    assert TOKEN not in page.content()  # never shown again

    Agent.objects.filter(pk=oracle.pk).update(remote_card={}, card_fetched_at=None)
    open_page(page, url(base, Agent, "changelist"))
    page.locator(f"input[name=_selected_action][value='{oracle.pk}']").check()
    page.locator("select[name=action]").select_option(
        label="Refresh the cards of the selected remote agents"
    )
    page.click("button[name=index]")
    expect(page.locator(".messagelist .success")).to_contain_text("card refreshed")
    oracle.refresh_from_db()
    assert oracle.remote_card["name"] == "Weather oracle"
