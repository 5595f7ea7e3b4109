"""An operator changes what grants power through Django admin in Chromium — a pool, a server
and its secret environment, an agent's pools, a partner's callable agents, an agent disabled,
a partner key and a verify-assertion token issued and revoked, a schedule, the approver
permission, a passkey revoked — and finds each change in the audit chain under their name,
on the dashboard's "configuration" filter, with no secret in it."""

import json

import pytest
from playwright.sync_api import expect

from a2a.models import PartnerKey
from agents.models import Agent
from mcplet_host import audit
from mcplet_host.models import AuditEvent
from passkey.models import BackendToken, PasskeyCredential
from pools.models import McpServer, Pool
from tests.browser import use_session
from tests.e2e.test_admin_browser import fill, open_page, url

pytestmark = pytest.mark.django_db(transaction=True)

APPROVE = "Held calls | ceremony | Can approve or reject tool calls with a passkey"


def save(page):
    page.click("input[name=_save]")
    done = page.locator(".messagelist .success").or_(page.get_by_text("created for"))
    expect(done.or_(page.locator(".errornote")).first).to_be_visible()
    assert page.locator(".errornote").count() == 0, page.locator("#content-main").inner_text()


def act(page, base, model, pk, action):
    open_page(page, url(base, model, "changelist"))
    page.locator(f"input[name=_selected_action][value='{pk}']").check()
    page.locator("select[name=action]").select_option(label=action)
    page.click("button[name=index]")
    expect(page.locator(".messagelist .success")).to_be_visible()


def test_each_change_in_admin_is_an_event_of_the_operator(
    page, live_server, admin_user, django_user_model
):
    base = live_server.url
    manager = django_user_model.objects.create_user("tencho", "t@example.jp", "pw-manager-1")
    passkey = PasskeyCredential.objects.create(
        user=manager, name="work laptop", credential_id="cred-1", public_key=b"k"
    )
    audit.record(audit.EventType.TOOL_EXECUTED, target_tool="read_site_stats")
    first = AuditEvent.objects.order_by("-seq").first().seq
    use_session(page, base, admin_user)

    open_page(page, url(base, Pool, "add"))
    fill(page, {"name": "ops-pool"})
    save(page)
    open_page(page, url(base, Pool, "add"))
    fill(page, {"name": "spare-pool"})
    save(page)

    open_page(page, url(base, McpServer, "add"))
    fill(page, {"name": "crm", "transport": "stdio (the host launches the command)"})
    fill(page, {"command": "python", "env": "CRM_TOKEN=tok-first-value"})
    save(page)
    server = McpServer.objects.get(name="crm")
    open_page(page, url(base, McpServer, "change", server.pk))
    fill(page, {"env": "CRM_TOKEN=tok-second-value"})
    save(page)

    open_page(page, url(base, Agent, "add"))
    fill(page, {"agent_id": "planner", "display_name": "Planner", "accessible_pools": ["ops-pool"]})
    save(page)
    planner = Agent.objects.get(agent_id="planner")
    open_page(page, url(base, Agent, "change", planner.pk))
    page.locator("#id_enabled").uncheck()
    fill(page, {"accessible_pools": ["spare-pool"]})
    save(page)
    open_page(page, url(base, Agent, "add"))
    fill(
        page,
        {
            "agent_id": "acme",
            "display_name": "ACME",
            "kind": "external (partner)",
            "callable_agents": ["planner"],
        },
    )
    save(page)

    open_page(page, url(base, PartnerKey, "add"))
    fill(page, {"agent": "acme", "name": "production"})
    save(page)
    raw_key = page.get_by_label("partner key").input_value()
    act(page, base, PartnerKey, PartnerKey.objects.get().pk, "Revoke the selected partner keys")

    open_page(page, url(base, BackendToken, "add"))
    fill(page, {"server": "crm", "name": "mail MCPlet"})
    save(page)
    token = BackendToken.objects.get()
    act(page, base, BackendToken, token.pk, "Revoke the selected verify-assertion tokens")

    open_page(page, base + "/admin/django_celery_beat/crontabschedule/add/")
    fill(page, {"minute": "30", "hour": "6"})
    save(page)
    open_page(page, base + "/admin/django_celery_beat/periodictask/add/")
    fill(
        page,
        {
            "name": "nightly",
            "task": "agents.run_director",
            "crontab": "30 6 * * * (m/h/dM/MY/d) UTC",
        },
    )
    save(page)

    open_page(page, base + f"/admin/auth/user/{manager.pk}/change/")
    fill(page, {"user_permissions": [APPROVE]})
    save(page)
    act(page, base, PasskeyCredential, passkey.pk, "Revoke the selected passkeys")

    spare = Pool.objects.get(name="spare-pool")
    open_page(page, url(base, Pool, "delete", spare.pk))
    page.click("#content form input[type=submit]")
    expect(page.locator(".messagelist .success")).to_be_visible()

    events = list(AuditEvent.objects.filter(seq__gt=first).order_by("seq"))
    seen = [(e.event_type, e.details.get("object") or e.details.get("passkey")) for e in events]
    expected = [
        ("mcplet.config.pool.created", "ops-pool"),
        ("mcplet.config.pool.created", "spare-pool"),
        ("mcplet.config.server.created", "crm"),
        ("mcplet.config.server.changed", "crm"),
        ("mcplet.config.agent.created", "planner"),
        ("mcplet.config.agent.grants_changed", "planner"),
        ("mcplet.config.agent.changed", "planner"),
        ("mcplet.config.agent.grants_changed", "planner"),
        ("mcplet.config.agent.created", "acme"),
        ("mcplet.config.agent.grants_changed", "acme"),
        ("mcplet.config.partner_key.issued", f"{PartnerKey.objects.get()}"),
        ("mcplet.config.partner_key.revoked", f"{PartnerKey.objects.get()}"),
        ("mcplet.config.verify_token.issued", f"{token}"),
        ("mcplet.config.verify_token.revoked", f"{token}"),
        ("mcplet.config.crontab.created", "30 6 * * * (m/h/dM/MY/d) UTC"),
        ("mcplet.config.schedule.created", "nightly: 30 6 * * * (m/h/dM/MY/d) UTC"),
        ("mcplet.config.approver.granted", "tencho"),
        ("mcplet.passkey.revoked", "work laptop"),
        ("mcplet.config.pool.deleted", "spare-pool"),
    ]
    for item in expected:  # in this order, whatever else the pages wrote between them
        assert item in seen, item
        seen = seen[seen.index(item) + 1 :]
    for event in events:
        if event.event_type.startswith("mcplet.config."):
            assert (event.actor_type, event.actor_id) == ("user", "admin"), event
            assert event.details["via"] == "admin", event
    grants = [e.details for e in events if e.event_type == "mcplet.config.agent.grants_changed"]
    assert (grants[0]["before"], grants[0]["after"]) == ([], ["ops-pool"])
    assert (grants[1]["before"], grants[1]["after"]) == (["ops-pool"], ["ops-pool", "spare-pool"])
    assert (grants[2]["grant"], grants[2]["after"]) == ("callable agents", ["planner"])
    deleted = next(e for e in events if e.event_type == "mcplet.config.pool.deleted")
    assert deleted.details["grants"] == {"held by": ["planner"]}  # went with it
    disabled = next(e for e in events if e.event_type == "mcplet.config.agent.changed")
    assert disabled.details["changes"]["enabled"] == [True, False]
    written = json.dumps([e.as_mgp() for e in events])
    for secret in ("tok-first-value", "tok-second-value", raw_key):
        assert secret not in written

    # The dashboard's filter shows the changes and nothing else.
    open_page(page, base + "/dashboard/audit/?event_type=configuration")
    rows = page.locator("table.audit tbody tr")
    expect(rows.first).to_be_visible()
    listed = " ".join(rows.all_text_contents())
    for event_type in ("mcplet.config.pool.deleted", "mcplet.passkey.revoked"):
        assert event_type in listed
    assert "TOOL_EXECUTED" not in listed
    assert page.problems == []


def test_an_agent_saved_unchanged_records_no_change(page, live_server, admin_user):
    """The browser posts a textarea's line breaks as CRLF: the prompts stay as written, and
    saving the form unchanged is no change of the agent's."""
    prompt = "Find guests at risk.\nAnswer in JSON.\n\nNever write to anyone."
    agent = Agent.objects.create(
        agent_id="planner", display_name="Planner", system_prompt=prompt, description="a\nb"
    )
    first = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
    use_session(page, live_server.url, admin_user)
    open_page(page, url(live_server.url, Agent, "change", agent.pk))
    save(page)
    agent.refresh_from_db()
    assert (agent.system_prompt, agent.description) == (prompt, "a\nb")
    changed = AuditEvent.objects.filter(seq__gt=first, event_type="mcplet.config.agent.changed")
    assert not changed.exists(), [e.details for e in changed]
    assert page.problems == []
