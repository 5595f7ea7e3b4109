"""Every page of the Django admin in Chromium, generated from `admin.site._registry` (a newly
registered model is covered, or this test says what it needs): for a superuser each changelist
(its filters, each filter applied, its actions), add form and change form render whole — every
fieldset and inline, every help text as plain text, the Save button — with no console error; a
valid add form saves and an invalid one shows its error. A staff user who may only view sees the
same pages read-only, with no Save and no action. And a partner is created end to end: the
agent, its pools and callable agents, a key shown once that then works at the A2A API."""

import hashlib
import html
import re
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.apps import apps
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets, help_text_for_field
from django.contrib.auth.models import Group, Permission
from django.test import RequestFactory
from django.urls import reverse
from django.utils import timezone
from django.utils.html import strip_tags
from django_celery_beat.models import (
    ClockedSchedule,
    IntervalSchedule,
    SolarSchedule,
)
from playwright.sync_api import expect

from a2a import messages
from a2a.models import A2AMessage, PartnerKey, PushConfig, PushDelivery
from agents.models import Agent, AgentRun
from held.kinds import tool_call
from held.models import Asker, Ceremony
from mcplet_host import audit
from mcplet_host.admin import IssuedSecretAdmin
from passkey.models import BackendToken, PasskeyCredential
from pools.models import Mcplet, McpServer, Pool
from tests.browser import use_session

pytestmark = pytest.mark.django_db(transaction=True)

ADMINS = sorted(admin.site._registry.items(), key=lambda item: item[0]._meta.label)

# What a valid and an invalid add form hold (field → value: a select's label, a list for a
# two-box selector), and the error the invalid one must show.
FORMS = {
    "auth.Group": ({"name": "approvers"}, ({"name": ""}, "This field is required.")),
    "auth.User": (
        {
            "username": "kitchen",
            "password1": "umbrella-harbour-73",
            "password2": "umbrella-harbour-73",
        },
        (
            {"username": "kitchen", "password1": "umbrella-harbour-73", "password2": "harbour-7"},
            "The two password fields didn’t match.",
        ),
    ),
    "django_celery_beat.PeriodicTask": (
        {
            "name": "nightly",
            "task": "agents.run_director",
            "crontab": "0 7 * * * (m/h/dM/MY/d) UTC",
        },
        ({"name": "nightly", "task": "agents.run_director"}, "One of clocked, interval, crontab"),
    ),
    "django_celery_beat.ClockedSchedule": (
        {"clocked_time_0": "2031-01-02", "clocked_time_1": "07:00:00"},
        ({"clocked_time_0": "2031-13-45", "clocked_time_1": "07:00"}, "Enter a valid date."),
    ),
    "django_celery_beat.CrontabSchedule": (
        {"minute": "30", "hour": "6"},
        ({"minute": "61"}, "not in 0-59"),
    ),
    "django_celery_beat.SolarSchedule": (
        {"event": "Sunrise", "latitude": "35.68", "longitude": "139.69"},
        ({"event": "Sunrise", "latitude": "135", "longitude": "139.69"}, "less than or equal"),
    ),
    "django_celery_beat.IntervalSchedule": (
        {"every": "15", "period": "Minutes"},
        ({"every": "0", "period": "Minutes"}, "greater than or equal to 1"),
    ),
    "pools.Pool": (
        {"name": "ops-pool", "rate_limit_per_minute": "30", "domain_allowlist": '["ops.example"]'},
        ({"name": "ops pool!"}, "Enter a valid “slug”"),
    ),
    "pools.McpServer": (
        {"name": "crm-http", "transport": "streamable HTTP", "url": "http://127.0.0.1:9/mcp"},
        ({"name": "crm-http", "transport": "streamable HTTP", "url": "ftp://x"}, "http://"),
    ),
    "agents.Agent": (
        {"agent_id": "report-agent", "display_name": "Reports", "model": "scripted/reference"},
        ({"agent_id": "report agent", "display_name": "Reports"}, "Enter a valid “slug”"),
    ),
    "a2a.PartnerKey": (
        {"agent": "partner-bot", "name": "staging"},
        ({"agent": "partner-bot", "name": ""}, "This field is required."),
    ),
    "passkey.BackendToken": (
        {"server": "reference", "name": "mail MCPlet"},
        ({"name": "mail MCPlet"}, "This field is required."),
    ),
}


@pytest.fixture
def existing(django_user_model, settings):
    """One saved object of every registered model, for its change page."""
    settings.PASSKEY_MODE = "https"  # the held call's page is the host's, no loopback server
    user = django_user_model.objects.create_user("tencho", "t@example.jp", "pw-manager-1")
    group = Group.objects.create(name="store managers")
    pool = Pool.objects.create(name="info-pool", rate_limit_per_minute=60)
    Pool.objects.create(name="media-pool", domain_allowlist=["*.example.org"])
    server = McpServer.objects.create(
        name="reference", transport="stdio", command="python", args=["-m", "mcplets.x"]
    )
    mcplet = Mcplet.objects.create(
        server=server,
        name="send_email",
        description="Sends one e-mail <b>per guest</b>",
        input_schema={"type": "object"},
        mcplet_type="action",
        visibility=["app"],
        pool_name="media-pool",
        auth_required="passkey",
        auth_enforcement="strict",
        status="accepted",
    )
    Mcplet.objects.create(
        server=server, name="legacy", status="rejected", rejection_reason="no mcpletType"
    )
    info = Agent.objects.create(
        agent_id="info-gathering-agent", display_name="Info", model="scripted/reference"
    )
    info.accessible_pools.set([pool])
    director = Agent.objects.create(
        agent_id="director", display_name="Director", kind=Agent.Kind.DIRECTOR
    )
    director.targets.set([info])
    director.schedule_cron("0 7 * * *")
    partner = Agent.objects.create(
        agent_id="partner-bot", display_name="Partner", kind=Agent.Kind.EXTERNAL
    )
    partner.callable_agents.set([info])
    key, _ = PartnerKey.issue(partner, "production")
    request = messages.task_request("partner-bot", "info-gathering-agent", {"date": "tomorrow"})
    a2a = A2AMessage.objects.create(
        message_id=request["messageId"],
        context_id=request["contextId"],
        type=A2AMessage.Type.TASK_REQUEST,
        sender_id="partner-bot",
        recipient_id="info-gathering-agent",
        body=request,
        external=True,
    )
    ceremony = tool_call.open_call(
        Ceremony.Kind.TOOL_CALL, mcplet, {"to": ["a@example.jp"]}, Asker("d")
    )
    run = AgentRun.objects.create(
        agent=info,
        provenance={"partner": partner.agent_id},
        request=a2a,
        context_id=request["contextId"],
        status=AgentRun.Status.ERROR,
        parameters={"date": "tomorrow"},
        error={"code": "LLM_ERROR", "message": "<script>alert(1)</script>"},
        waiting_for=ceremony,
    )
    passkey = PasskeyCredential.objects.create(
        user=user, name="store phone", credential_id=uuid.uuid4().hex, public_key=b"\x01"
    )
    token, _ = BackendToken.issue(server, "mail MCPlet")
    event = audit.record(
        audit.EventType.TOOL_BLOCKED, actor_id="info-gathering-agent", target_tool="drop_database"
    )
    webhook = PushConfig.objects.create(
        task=a2a,
        config_id="hook-1",
        url="https://partner.example/hook?<script>",
        auth_scheme="Bearer",
        sealed={"token": "t", "credentials": "c"},
        last_status={"state": "TASK_STATE_WORKING"},
    )
    status = {"taskId": str(a2a.message_id), "status": {"state": "TASK_STATE_WORKING"}}
    PushDelivery.objects.create(
        config=webhook, sequence=1, event={"statusUpdate": status}, last_error="HTTP 503 <b>"
    )
    objects = [user, group, pool, server, mcplet, info, run, key, a2a, ceremony, passkey, token]
    objects += [webhook]
    objects += [event, director.schedule, director.schedule.crontab]
    objects += [
        ClockedSchedule.objects.create(clocked_time=timezone.now() + timedelta(days=1)),
        SolarSchedule.objects.create(event="sunset", latitude=35.68, longitude=139.69),
        IntervalSchedule.objects.create(every=10, period=IntervalSchedule.MINUTES),
    ]
    return {type(obj): obj for obj in objects}


def admin_request(user, path="/admin/"):
    request = RequestFactory().get(path)
    request.user = user
    return request


def url(base, model, view, *args):
    opts = model._meta
    return base + reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=args)


def reads_as(text, model):
    """What a help text must read as in the page: ours exactly as written (nothing in them is
    HTML); Django's and django-celery-beat's without their tags (some are HTML, unmarked)."""
    # (Installed libraries may live under BASE_DIR too: CI's .venv is inside the checkout.)
    where = Path(apps.get_app_config(model._meta.app_label).path)
    ours = where.is_relative_to(settings.BASE_DIR) and "site-packages" not in where.parts
    text = str(text) if ours else html.unescape(strip_tags(str(text)))
    return re.sub(r"\s+", " ", text).strip()


def open_page(page, address):
    response = page.goto(address)
    assert response.status == 200, f"{response.status} {address}"
    return response


def check_changelist(page, base, model, model_admin, user, *, may_act):
    request = admin_request(user, url("", model, "changelist"))
    open_page(page, url(base, model, "changelist"))
    expect(page.locator("#result_list")).to_be_visible()
    changelist = model_admin.get_changelist_instance(request)
    shown = [spec.title for spec in changelist.filter_specs if spec.has_output()]
    filters = page.locator("#changelist-filter details[data-filter-title]")
    assert [f.get_attribute("data-filter-title") for f in filters.all()] == [str(t) for t in shown]
    choices = [str(label) for _, label in model_admin.get_action_choices(request)]
    options = page.locator("#changelist-form select[name=action] option")
    if may_act and len(choices) > 1:
        assert options.all_text_contents() == choices
    else:
        assert options.count() == 0, f"{model._meta.label}: a view-only user may act"
    if not may_act:
        return
    # Each filter narrowed to its first choice still renders.
    links = [f.locator("li a").nth(1).get_attribute("href") for f in filters.all()]
    for query in links:
        open_page(page, url(base, model, "changelist") + query)
        expect(page.locator("#changelist")).to_be_visible()


def check_form(page, model, model_admin, request, obj, *, editable):
    """Every fieldset and inline is in the page, each help text reads as written."""
    label = model._meta.label
    fieldsets = model_admin.get_fieldsets(request, obj)
    shown = page.locator("#content-main form > div > fieldset.module")
    expect(shown).to_have_count(len(fieldsets))
    for index, (name, options) in enumerate(fieldsets):
        fieldset = shown.nth(index)
        if name:
            expect(fieldset.locator(".fieldset-heading")).to_have_text(str(name))
        for field in flatten_fieldsets([(name, options)]):
            expect(fieldset.locator(f".field-{field}").first).to_be_attached()
    for formset, _inline in model_admin.get_formsets_with_inlines(request, obj):
        expect(page.locator(f"#{formset.get_default_prefix()}-group")).to_be_attached()

    form = model_admin.get_form(request, obj)(instance=obj)
    # On a page the user may only view, every field is shown read-only.
    readonly = model_admin.get_readonly_fields(request, obj) if editable else form.fields
    helps = [
        re.sub(r"\s+", " ", t).strip()
        for t in page.locator("#content-main form .help").all_text_contents()
    ]
    for field in flatten_fieldsets(fieldsets):
        if field in form.fields and field not in readonly:
            text = form.fields[field].help_text
        else:
            text = help_text_for_field(field, model)
        if text:  # (a prefix: django-celery-beat's script appends what a crontab means)
            assert any(h.startswith(reads_as(text, model)) for h in helps), (
                f"{label}.{field}: help cut"
            )
    save = page.locator("input[name=_save]")
    if editable:
        expect(save).to_be_visible()
    else:
        expect(save).to_have_count(0)
        expect(page.locator(".submit-row a.closelink")).to_be_visible()


def fill(page, values):
    for name, value in values.items():
        field = page.locator(f"#id_{name}")
        if isinstance(value, list):  # a filter_horizontal two-box selector
            for choice in value:
                page.locator(f"#id_{name}_from").select_option(label=choice)
                page.click(f"#id_{name}_add")
        elif field.evaluate("e => e.tagName") == "SELECT":
            field.select_option(label=value)
        else:
            field.fill(value)


def check_add(page, model, model_admin):
    """On the add form: the invalid values show their error, then the valid ones save."""
    valid, (invalid, error) = FORMS[model._meta.label]
    fill(page, invalid)
    page.click("input[name=_save]")
    expect(page.locator(".errornote")).to_be_visible()
    expect(page.locator("#content-main form .errorlist").first).to_contain_text(error)
    fill(page, valid)
    page.click("input[name=_save]")
    if isinstance(model_admin, IssuedSecretAdmin):  # the secret's one showing, not a redirect
        expect(page.locator("#content h1")).to_contain_text("created for")
    else:
        expect(page.locator(".messagelist .success")).to_contain_text("was added successfully")


def test_every_admin_page_renders_whole_for_a_superuser(page, live_server, existing, admin_user):
    base = live_server.url
    use_session(page, base, admin_user)
    for model, model_admin in ADMINS:
        label = model._meta.label
        assert model in existing, f"{label}: add one to the `existing` fixture"
        request = admin_request(admin_user)
        check_changelist(page, base, model, model_admin, admin_user, may_act=True)

        if model_admin.has_add_permission(request):
            assert label in FORMS, f"{label}: add a valid and an invalid form to FORMS"
            open_page(page, url(base, model, "add"))
            check_form(page, model, model_admin, request, None, editable=True)
            check_add(page, model, model_admin)

        obj = existing[model]
        open_page(page, url(base, model, "change", obj.pk))
        editable = model_admin.has_change_permission(request, obj)
        check_form(page, model, model_admin, request, obj, editable=editable)
        assert page.problems == [], label


def test_a_view_only_staff_user_reads_every_page(page, live_server, existing, django_user_model):
    viewer = django_user_model.objects.create_user("auditor", "a@example.org", "pw-auditor-1")
    viewer.is_staff = True
    viewer.save()
    codenames = [f"view_{model._meta.model_name}" for model, _ in ADMINS]
    viewer.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    viewer = django_user_model.objects.get(pk=viewer.pk)  # no permission cache
    base = live_server.url
    use_session(page, base, viewer)
    for model, model_admin in ADMINS:
        request = admin_request(viewer)
        check_changelist(page, base, model, model_admin, viewer, may_act=False)
        expect(page.locator(".object-tools .addlink")).to_have_count(0)
        obj = existing[model]
        open_page(page, url(base, model, "change", obj.pk))
        check_form(page, model, model_admin, request, obj, editable=False)
        assert page.problems == [], model._meta.label


def test_an_operator_creates_a_partner_and_its_key(page, live_server, admin_user):
    base = live_server.url
    Pool.objects.create(name="info-pool")
    Pool.objects.create(name="media-pool")
    Agent.objects.create(agent_id="info-gathering-agent", display_name="Info")
    Agent.objects.create(agent_id="planning-agent", display_name="Planning")
    Agent.objects.create(agent_id="other-partner", display_name="Other", kind=Agent.Kind.EXTERNAL)
    use_session(page, base, admin_user)

    open_page(page, url(base, Agent, "add"))
    offered = page.locator("#id_callable_agents_from option").all_text_contents()
    assert offered == ["info-gathering-agent", "planning-agent"]  # no partner calls a partner
    fill(
        page,
        {
            "agent_id": "acme-travel",
            "display_name": "ACME Travel",
            "kind": "external (partner)",
            "accessible_pools": ["info-pool"],
            "callable_agents": ["info-gathering-agent"],
        },
    )
    page.click("input[name=_save]")
    expect(page.locator(".messagelist .success")).to_contain_text("acme-travel")
    partner = Agent.objects.get(agent_id="acme-travel")
    assert partner.kind == Agent.Kind.EXTERNAL
    assert [p.name for p in partner.accessible_pools.all()] == ["info-pool"]
    assert [a.agent_id for a in partner.callable_agents.all()] == ["info-gathering-agent"]

    open_page(page, url(base, PartnerKey, "add"))
    expect(page.locator("#id_agent option")).to_have_text(
        ["---------", "acme-travel", "other-partner"]
    )
    fill(page, {"agent": "acme-travel", "name": "production"})
    page.click("input[name=_save]")
    expect(page.locator("#content h1")).to_have_text("Partner key created for acme-travel")
    raw = page.get_by_label("partner key").input_value()
    key = PartnerKey.objects.get(agent=partner)
    stored = PartnerKey.objects.filter(pk=key.pk).values().get()
    assert raw not in {str(value) for value in stored.values()}
    assert stored["key_hash"] == hashlib.sha256(raw.encode()).hexdigest()

    open_page(page, url(base, PartnerKey, "change", key.pk))  # never shown again
    expect(page.locator("#content-main")).to_contain_text(key.prefix)
    assert raw not in page.content()

    bearer = {"Authorization": f"Bearer {raw}"}
    answer = page.request.get(f"{base}/a2a/agents", headers=bearer)
    assert answer.status == 200, answer.text()
    assert [card["agentId"] for card in answer.json()["agents"]] == ["info-gathering-agent"]

    open_page(page, url(base, PartnerKey, "changelist"))
    page.locator(f"input[name=_selected_action][value='{key.pk}']").check()
    page.locator("select[name=action]").select_option(label="Revoke the selected partner keys")
    page.click("button[name=index]")
    expect(page.locator(".messagelist .success")).to_contain_text("1 partner key revoked.")
    assert page.request.get(f"{base}/a2a/agents", headers=bearer).status == 401
    assert page.problems == []


def test_a_server_of_many_tools_is_shown_and_deleted_in_pages_of_a_size(
    page, live_server, admin_user
):
    """Its change page lists its first 50 MCPlets and links to them all; its delete page
    lists the first 50 of what it takes with it and counts the rest."""
    from pools.models import Mcplet, McpServer

    server = McpServer.objects.create(name="big", transport="http", url="http://big.example/mcp")
    Mcplet.objects.bulk_create(
        Mcplet(server=server, name=f"tool_{i:03}", status="accepted") for i in range(120)
    )
    base = live_server.url
    use_session(page, base, admin_user)
    open_page(page, f"{base}/admin/pools/mcpserver/{server.pk}/change/")
    listed = page.locator("table.mcplets-listed tbody tr")
    expect(listed).to_have_count(50)
    page.get_by_role("link", name="All 120 MCPlets of this server (the first 50 are above)").click()
    expect(page.locator("#result_list tbody tr")).to_have_count(100)  # the changelist's page
    open_page(page, f"{base}/admin/pools/mcpserver/{server.pk}/delete/")
    expect(page.locator("#content")).to_contain_text("… and 70 more")
    page.click("input[type=submit]")
    expect(page.locator(".messagelist .success")).to_contain_text("deleted successfully")
    assert not Mcplet.objects.exists() and page.problems == []
