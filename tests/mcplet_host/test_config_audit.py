"""Configuration changes in the audit chain (mcplet_host.config_audit): made through model
methods, a management command or the dashboard, each is an event naming who made it and what
changed, in the change's own transaction, never holding a secret's value."""

import json

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.urls import reverse
from django_celery_beat.models import PeriodicTask

from a2a.models import PartnerKey
from agents.models import Agent
from dashboard import queries
from mcplet_host import audit
from mcplet_host.models import AuditEvent
from passkey.models import BackendToken
from pools.models import McpServer, Pool
from tests.processes import manage

pytestmark = pytest.mark.django_db


def config_events(kind=""):
    events = AuditEvent.objects.filter(event_type__startswith=f"mcplet.config.{kind}")
    return list(events.order_by("seq"))


def everything_written():
    return json.dumps([e.as_mgp() for e in AuditEvent.objects.all()])


@pytest.fixture
def partner():
    return Agent.objects.create(agent_id="acme", display_name="ACME", kind=Agent.Kind.EXTERNAL)


def test_a_key_issued_and_revoked_through_the_model_names_the_host_and_never_the_key(partner):
    key, raw = PartnerKey.issue(partner, "production")
    key.revoke()
    issued, revoked = config_events("partner_key")
    assert issued.event_type == "mcplet.config.partner_key.issued"
    assert (issued.actor_type, issued.actor_id) == ("system", "")
    assert issued.details["via"] == "host"
    assert issued.details["values"] == {"agent": "acme", "name": "production"}
    assert revoked.event_type == "mcplet.config.partner_key.revoked"
    assert revoked.details["changes"]["revoked_at"][0] is None
    assert raw not in everything_written() and key.key_hash not in everything_written()


def test_grants_are_recorded_before_and_after_from_either_side(partner):
    info, media = Pool.objects.create(name="info-pool"), Pool.objects.create(name="media-pool")
    agent = Agent.objects.create(agent_id="planner", display_name="Planner")
    agent.accessible_pools.set([info])
    media.agents.add(agent)  # the pool's side of the same grant
    agent.accessible_pools.remove(info)
    partner.callable_agents.add(agent)
    grants = [e.details for e in config_events("agent.grants_changed")]
    assert [(g["object"], g["grant"], g["before"], g["after"]) for g in grants] == [
        ("planner", "pools", [], ["info-pool"]),
        ("planner", "pools", ["info-pool"], ["info-pool", "media-pool"]),
        ("planner", "pools", ["info-pool", "media-pool"], ["media-pool"]),
        ("acme", "callable agents", [], ["planner"]),
    ]
    assert grants[2]["removed"] == ["info-pool"] and grants[1]["added"] == ["media-pool"]


def test_a_server_change_names_its_fields_and_withholds_its_secrets():
    server = McpServer.objects.create(
        name="crm",
        transport=McpServer.Transport.STDIO,
        command="python",
        env={"CRM_TOKEN": "tok-first-value"},
    )
    server.env = {"CRM_TOKEN": "tok-second-value"}
    server.args = ["-m", "crm"]
    server.save()
    server.delete()
    created, changed, deleted = config_events("server")
    assert created.target_server == "crm"
    assert created.details["values"]["env"] == {"keys": ["CRM_TOKEN"], "values": "withheld"}
    assert changed.details["changes"] == {
        "args": [[], ["-m", "crm"]],
        "env": "changed (withheld)",
    }
    assert deleted.event_type == "mcplet.config.server.deleted"
    assert "tok-first-value" not in everything_written()
    assert "tok-second-value" not in everything_written()


def test_a_change_rolled_back_leaves_no_event():
    pool = Pool.objects.create(name="info-pool")
    before = AuditEvent.objects.count()
    with pytest.raises(RuntimeError), transaction.atomic():
        pool.rate_limit_per_minute = 5
        pool.save()
        raise RuntimeError
    assert AuditEvent.objects.count() == before


def test_a_save_that_changes_nothing_and_beats_bookkeeping_are_not_events():
    director = Agent.objects.create(agent_id="director", display_name="D", kind=Agent.Kind.DIRECTOR)
    director.schedule_cron("0 9 * * *")
    director.save()  # nothing changed
    before = AuditEvent.objects.count()
    task = PeriodicTask.objects.get(name="Director director")
    task.total_run_count += 1
    task.save()  # beat's own write after a run
    assert AuditEvent.objects.count() == before
    task.enabled = False
    task.save()
    assert config_events("schedule")[-1].details["changes"] == {"enabled": [True, False]}


def test_approver_permission_granted_directly_and_through_a_group(django_user_model):
    user = django_user_model.objects.create_user("tencho", "t@example.jp", "pw-manager-1")
    approve = Permission.objects.get(codename="approve_ceremony")
    user.user_permissions.add(approve)
    user.user_permissions.remove(approve)
    group = Group.objects.create(name="store managers")
    group.permissions.add(approve)
    user.groups.add(group)
    kinds = [(e.event_type, e.details["object"]) for e in config_events()[1:]]
    assert kinds == [
        ("mcplet.config.approver.granted", "tencho"),
        ("mcplet.config.approver.removed", "tencho"),
        ("mcplet.config.group.created", "store managers"),
        ("mcplet.config.approver.granted", "store managers"),
        ("mcplet.config.approver.granted", "tencho"),
    ]
    assert config_events("user.created")[0].details["values"]["password"] == "set (withheld)"


def test_a_dashboard_action_names_the_operator(staff_client):
    agent = Agent.objects.create(agent_id="planner", display_name="Planner")
    staff_client.post(reverse("dashboard:agent-enabled", args=[agent.pk]), {"enabled": "0"})
    changed = config_events("agent.changed")[-1]
    assert (changed.actor_type, changed.actor_id) == ("user", "operator")
    assert changed.details["changes"] == {"enabled": [True, False]}
    assert changed.details["via"] == "dashboard"


def test_the_configuration_filter_keeps_configuration_only(staff_client):
    Pool.objects.create(name="info-pool")
    audit.record(audit.EventType.TOOL_EXECUTED, target_tool="read_site_stats")
    found = {e.event_type for e in queries.audit_events({"event_type": "configuration"})}
    assert "mcplet.config.pool.created" in found
    assert audit.EventType.TOOL_EXECUTED not in found
    page = staff_client.get(reverse("dashboard:audit"), {"event_type": "configuration"})
    assert "mcplet.config.pool.created" in page.content.decode()
    assert "read_site_stats" not in page.content.decode()


def test_verify_audit_names_an_edited_configuration_event():
    Pool.objects.create(name="info-pool")
    server = McpServer.objects.create(name="crm", transport="stdio", command="python")
    BackendToken.issue(server, "mail MCPlet")
    issued = config_events("verify_token")[0]
    with connection.cursor() as cursor:  # someone hides who got a token
        cursor.execute(
            "UPDATE mcplet_host_auditevent SET details = %s WHERE seq = %s",
            ['{"object": "nothing"}', issued.seq],
        )
    with pytest.raises(CommandError, match=f"event #{issued.seq}"):
        call_command("verify_audit")


@pytest.mark.django_db(transaction=True)
def test_a_management_command_is_named_as_such(partner):
    result = manage("create_partner_key", "acme", "--name", "ci")
    assert result.returncode == 0, result.stderr
    issued = config_events("partner_key.issued")[0]
    assert (issued.actor_type, issued.actor_id) == ("system", "manage.py create_partner_key")
    assert issued.details["via"] == "command"
    raw = next(w for w in result.stdout.split() if w.startswith("mcpk_"))
    assert raw not in everything_written()
