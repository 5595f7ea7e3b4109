"""What the admin says, read in Chromium: model names in the plural as English spells them
("Ceremonies"), every counting action's message in the singular for one object and the plural
for two, and nothing (not the JSON word "null") where a value does not exist yet."""

import uuid

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from a2a.models import PartnerKey
from agents.models import Agent, AgentRun
from held.kinds import tool_call
from held.models import Asker, Ceremony
from passkey.models import BackendToken, PasskeyCredential
from pools.models import Mcplet, McpServer
from tests.browser import use_session
from tests.e2e.test_admin_browser import open_page, url

pytestmark = pytest.mark.django_db(transaction=True)


def act(page, base, model, objects, action):
    open_page(page, url(base, model, "changelist"))
    for obj in objects:
        page.locator(f"input[name=_selected_action][value='{obj.pk}']").check()
    page.locator("select[name=action]").select_option(label=action)
    page.click("button[name=index]")
    return page.locator(".messagelist .success")


def test_the_admin_counts_in_english(page, live_server, admin_user, django_user_model, settings):
    settings.PASSKEY_MODE = "https"  # the held call's page is the host's, no loopback server
    base = live_server.url
    use_session(page, base, admin_user)
    open_page(page, base + reverse("admin:index"))
    expect(page.locator("#content-main")).to_contain_text("Ceremonies")
    assert "Ceremonys" not in page.content()

    partner = Agent.objects.create(agent_id="partner-bot", kind=Agent.Kind.EXTERNAL)
    info = Agent.objects.create(agent_id="info-gathering-agent")
    server = McpServer.objects.create(name="reference", transport="stdio", command="python")
    mcplet = Mcplet.objects.create(
        server=server, name="send_email", mcplet_type="action", status="accepted"
    )
    manager = django_user_model.objects.create_user("tencho", "t@example.jp", "pw-manager-1")
    three = range(3)
    cases = [
        (
            [PartnerKey.issue(partner, f"key {n}")[0] for n in three],
            "Revoke the selected partner keys",
            ("partner key revoked.", "partner keys revoked."),
        ),
        (
            [BackendToken.issue(server, f"token {n}")[0] for n in three],
            "Revoke the selected verify-assertion tokens",
            ("verify-assertion token revoked.", "verify-assertion tokens revoked."),
        ),
        (
            [
                PasskeyCredential.objects.create(
                    user=manager, name=f"phone {n}", credential_id=uuid.uuid4().hex, public_key=b"1"
                )
                for n in three
            ],
            "Revoke the selected passkeys",
            ("passkey revoked.", "passkeys revoked."),
        ),
        (
            [AgentRun.objects.create(agent=info, context_id=f"ctx-{n}") for n in three],
            "Cancel the selected runs (a call they wait for is rejected)",
            ("run cancelled.", "runs cancelled."),
        ),
        (
            [
                tool_call.open_call(Ceremony.Kind.TOOL_CALL, mcplet, {"n": n}, Asker("d"))
                for n in three
            ],
            "Reject the selected pending calls (nothing runs)",
            ("call rejected.", "calls rejected."),
        ),
    ]
    for objects, action, (one, many) in cases:
        model = type(objects[0])
        expect(act(page, base, model, objects[:1], action)).to_have_text(f"1 {one}")
        expect(act(page, base, model, objects[1:], action)).to_have_text(f"2 {many}")
    assert page.problems == []


def test_what_does_not_exist_yet_reads_as_nothing(page, live_server, admin_user, settings):
    settings.PASSKEY_MODE = "https"
    base = live_server.url
    use_session(page, base, admin_user)
    open_page(page, url(base, Agent, "add"))  # a new agent has no card yet
    expect(page.locator(".field-remote_card_json .readonly")).to_have_text("-")

    server = McpServer.objects.create(name="reference", transport="stdio", command="python")
    mcplet = Mcplet.objects.create(
        server=server, name="send_email", mcplet_type="action", status="accepted"
    )
    pending = tool_call.open_call(Ceremony.Kind.TOOL_CALL, mcplet, {"to": "a"}, Asker("d"))
    open_page(page, url(base, Ceremony, "change", pending.pk))  # not run: no result yet
    expect(page.locator(".field-result_json .readonly")).to_have_text("-")
    assert page.problems == []
