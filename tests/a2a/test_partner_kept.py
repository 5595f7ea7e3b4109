"""What a partner's request is authenticated and routed by — its key, its agent, the agents it
may call — is kept with the registry (mcplet_host.registry): a request that finds nothing
changed reads one row for it. A change made any way at all (raw SQL as another process would, a
queryset update, a deletion) refuses the very next request; nothing ran is read from the MCP
server's own log."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from a2a.models import A2AMessage, PartnerKey
from agents.models import Agent
from mcplet_host.models import RegistryVersion
from tests.a2a.test_endpoint import error_of, info_script, task

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]


def sql(statement, *params):
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def through(field):
    return connection.ops.quote_name(
        Agent._meta.get_field(field).remote_field.through._meta.db_table
    )


@pytest.fixture
def partner(registry, script):
    registry["info"].model = info_script(script)  # were it to run, it would call two tools
    registry["info"].save()
    partner = registry["partner"]
    partner.callable_agents.set([registry["info"]])
    partner.accessible_pools.set([registry["info-pool"]])
    return partner


@pytest.fixture
def api(api):
    assert api.get("/a2a/agents/info-gathering-agent").status_code == 200  # all kept
    return api


def test_a_kept_request_reads_the_token_and_appends_its_audit_event(
    api, client, django_assert_num_queries
):
    headers = {"Authorization": f"Bearer {api.raw}"}
    client.get("/a2a/agents/info-gathering-agent", headers=headers)  # (this thread's last use)
    with django_assert_num_queries(2):  # the registry's token; the audit append
        response = client.get("/a2a/agents/info-gathering-agent", headers=headers)
    assert response.status_code == 200 and response.json()["agentId"] == "info-gathering-agent"


def test_marking_a_key_used_does_not_move_the_token(api):
    token = RegistryVersion.objects.get().token
    PartnerKey.objects.filter(pk=api.key.pk).update(last_used_at=timezone.now())
    assert RegistryVersion.objects.get().token == token
    PartnerKey.objects.filter(pk=api.key.pk).update(name="renamed")
    assert RegistryVersion.objects.get().token != token


def test_last_used_is_written_at_most_once_a_minute(api):
    first = PartnerKey.objects.get(pk=api.key.pk).last_used_at  # (the fixture's request)
    assert first is not None
    assert api.get("/a2a/agents").status_code == 200
    assert PartnerKey.objects.get(pk=api.key.pk).last_used_at == first


def table(model):
    return connection.ops.quote_name(model._meta.db_table)


CHANGES = {
    "key revoked by raw SQL": (
        lambda api: sql(
            f"UPDATE {table(PartnerKey)} SET revoked_at = %s WHERE id = %s",  # noqa: S608
            timezone.now(),
            api.key.pk,
        ),
        401,
        "This partner key was revoked.",
    ),
    "key expired by a queryset update": (
        lambda api: PartnerKey.objects.filter(pk=api.key.pk).update(
            expires_at=timezone.now() - timedelta(seconds=1)
        ),
        401,
        "This partner key has expired.",
    ),
    "key deleted by raw SQL": (
        lambda api: sql(f"DELETE FROM {table(PartnerKey)} WHERE id = %s", api.key.pk),  # noqa: S608
        401,
        "This partner key is not known.",
    ),
    "partner disabled by a queryset update": (
        lambda api: Agent.objects.filter(agent_id="partner-bot").update(enabled=False),
        401,
        "This partner is disabled.",
    ),
    "grant to call the agent removed by raw SQL": (
        lambda api: sql(f"DELETE FROM {through('callable_agents')}"),  # noqa: S608
        403,
        "You may not send tasks to 'info-gathering-agent'.",
    ),
    "agent called disabled by a queryset update": (
        lambda api: Agent.objects.filter(agent_id="info-gathering-agent").update(enabled=False),
        403,
        "You may not send tasks to 'info-gathering-agent'.",
    ),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_refuses_the_very_next_request(api, calls, change):
    make, status, says = CHANGES[change]
    make(api)
    response = api.post("/a2a/tasks", json=task())
    assert response.status_code == status and error_of(response)["message"] == says
    assert not A2AMessage.objects.exists() and calls() == []


def test_a_grant_added_is_seen_by_the_next_request_too(api, registry, calls):
    response = api.get("/a2a/agents/dispatch-agent")
    assert response.status_code == 404
    registry["partner"].callable_agents.add(registry["dispatch"])
    assert api.get("/a2a/agents/dispatch-agent").json()["agentId"] == "dispatch-agent"


def test_each_request_has_its_own_key_and_agent(api, partner):
    first, _ = PartnerKey.lookup(api.raw)
    first.agent.display_name = "changed by a view, never saved"
    second, _ = PartnerKey.lookup(api.raw)
    assert second is not first and second.agent.display_name == partner.display_name
