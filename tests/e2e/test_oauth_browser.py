"""An operator connects a server behind OAuth from admin, in Chromium: "Not connected" with
Connect…, the host's explanation page, the authorization server (our SDK-built test server,
which approves at once) and back to the host's callback, which finishes the exchange and
discovers the tools; the page then says who issued the tokens, their scopes and expiry, and
never a token (nor does any log). A call goes through with the grant; Disconnect revokes it
and calls then fail as unavailable, with nothing sent."""

import logging
import os

import pytest

if not os.environ.get("CI"):  # in CI a missing Playwright fails the run instead
    pytest.importorskip("playwright")
from playwright.sync_api import expect  # noqa: E402

from agents.models import Agent
from mcplet_host import gateway
from mcplets.examples.oauth_protected import serve
from pools.models import McpServer
from pools.oauth.models import OAuthGrant
from tests.browser import outside_the_browser_loop, screenshot, use_session
from tests.conftest import Calls

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_superuser("ops", "ops@example.org", "pw-ops-1")


def test_connect_call_and_disconnect_in_the_browser(page, host, operator, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)  # every logger of the host and its libraries, every thread
    calls = Calls(tmp_path / "calls.jsonl")
    with serve(calls_log=calls.path) as base:
        server = McpServer.objects.create(
            name="tracker", transport="http", url=f"{base}/mcp", auth=McpServer.Auth.OAUTH
        )
        use_session(page, host, operator)
        page.goto(f"{host}/dashboard/")
        expect(page.locator(".server-warning")).to_contain_text("OAuth: not connected.")
        page.locator(".server-warning").get_by_role("link", name="Connect…").click()
        expect(page.locator("h1")).to_have_text("Connect tracker")
        change = f"{host}/admin/pools/mcpserver/{server.pk}/change/"
        page.goto(change)
        expect(page.locator(".field-oauth_connection")).to_contain_text("Not connected.")
        screenshot(page, "oauth-not-connected")
        page.get_by_role("link", name="Connect…").click()
        expect(page.locator("h1")).to_have_text("Connect tracker")
        expect(page.locator("#content")).to_contain_text(f"{host}/oauth/callback")
        screenshot(page, "oauth-connect")
        page.get_by_role("button", name="Continue to the authorization server").click()

        expect(page.locator(".messagelist")).to_contain_text(
            f"Connected tracker: tokens issued by {base}"
        )
        assert page.url == change
        summary = page.locator(".field-oauth_connection")
        expect(summary).to_contain_text("Connected")
        expect(summary).to_contain_text(f"for {base}/mcp")
        expect(summary).to_contain_text("expires in")
        screenshot(page, "oauth-connected")
        grant = OAuthGrant.objects.get(server=server)
        secrets = [grant.access_token, grant.refresh_token, grant.secret["client"]["client_secret"]]
        pages = [page.content()]
        page.goto(f"{host}/admin/pools/mcpserver/")
        expect(page.locator("#result_list")).to_contain_text("connected")
        pages.append(page.content())

        with outside_the_browser_loop():
            agent = Agent.objects.create(agent_id="reader", display_name="Reader")
            done = gateway.call_tool(agent, "whoami", {"echo": "from the browser test"})
        assert done.status == "executed", done.envelope
        assert calls("whoami")[0]["subject"] == grant.client_id

        page.goto(change)
        page.get_by_role("link", name="Disconnect").click()
        expect(page.locator("#content")).to_contain_text("to revoke the host's tokens")
        pages.append(page.content())
        page.get_by_role("button", name="Yes, disconnect").click()
        expect(page.locator(".messagelist")).to_contain_text(
            "Disconnected tracker: the host forgot its tokens, and the authorization server "
            "revoked them."
        )
        expect(page.locator(".field-oauth_connection")).to_contain_text("Not connected.")
        pages.append(page.content())
        assert not OAuthGrant.objects.filter(server=server).exists()

        with outside_the_browser_loop():
            refused = gateway.call_tool(agent, "whoami", {"echo": "after"})
        assert refused.envelope["error"]["code"] == "SERVICE_UNAVAILABLE"
        assert "not connected" in refused.envelope["error"]["message"]
    assert len(calls("whoami")) == 1
    for secret in secrets:
        assert all(secret not in html for html in pages)
        assert secret not in caplog.text
    assert "401, b'Unauthorized'" in caplog.text  # the log did see the OAuth exchanges
    assert page.problems == []
