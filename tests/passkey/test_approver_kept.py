"""Who is signed in and what they may do is kept with the registry (mcplet_host.backends): a
request that finds nothing changed reads one row for the user and their permissions. A change
made any way at all (raw SQL as another process would, a queryset update) refuses the very next
approval; nothing ran is read from the MCP server's own log."""

import pytest
from django.contrib.auth.models import Group, Permission
from django.db import connection

from held.models import Ceremony
from mcplet_host.models import RegistryVersion
from tests.passkey.conftest import post_assertion, sign, url

# Eager: an approval that went through would run the call at once, into the server's log.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]


def sql(statement, *params):
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def through(model, field):
    table = model._meta.get_field(field).remote_field.through._meta.db_table
    return connection.ops.quote_name(table)


def test_a_kept_approver_costs_one_row(
    approver_client, authenticator, held, django_assert_num_queries
):
    approver_client.post(url(held, "challenge"))  # (all kept)
    with django_assert_num_queries(3):  # the registry's token; the ceremony; its passkeys
        response = approver_client.post(url(held, "challenge"))
    assert response.status_code == 200


def test_signing_in_does_not_move_the_token(approver, client):
    token = RegistryVersion.objects.get().token
    client.force_login(approver)  # (writes last_login)
    assert RegistryVersion.objects.get().token == token


def withdraw_by_raw_sql(approver):
    sql(f"DELETE FROM {through(type(approver), 'user_permissions')}")  # noqa: S608


def deactivate_by_a_queryset_update(approver):
    type(approver).objects.filter(pk=approver.pk).update(is_active=False)


def change_the_password_by_raw_sql(approver):
    table = connection.ops.quote_name(type(approver)._meta.db_table)
    sql(f"UPDATE {table} SET password = %s WHERE id = %s", "!", approver.pk)  # noqa: S608


def test_unchanged_the_approval_runs_the_call(approver_client, authenticator, held, calls):
    credential = sign(approver_client, held, authenticator)
    assert post_assertion(approver_client, held, credential).status_code == 200
    held.refresh_from_db()
    assert held.status == Ceremony.Status.EXECUTED
    assert [c["name"] for c in calls()] == ["send_email"]


CHANGES = {
    "permission withdrawn by raw SQL": (withdraw_by_raw_sql, 403),
    "approver deactivated by a queryset update": (deactivate_by_a_queryset_update, 401),
    "password changed by raw SQL (signs the session out)": (change_the_password_by_raw_sql, 401),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_refuses_the_very_next_approval(
    approver, approver_client, authenticator, held, calls, change
):
    credential = sign(approver_client, held, authenticator)  # all kept, the challenge issued
    make, status = CHANGES[change]
    make(approver)
    response = post_assertion(approver_client, held, credential)
    assert response.status_code == status, response.content
    held.refresh_from_db()
    assert held.status == Ceremony.Status.PENDING and calls() == []


def test_a_groups_permission_withdrawn_refuses_the_very_next_approval(
    approver, approver_client, authenticator, held, calls
):
    group = Group.objects.create(name="approvers")
    group.permissions.add(Permission.objects.get(codename="approve_ceremony"))
    approver.groups.add(group)
    approver.user_permissions.clear()
    credential = sign(approver_client, held, authenticator)  # allowed through the group
    sql(f"DELETE FROM {through(Group, 'permissions')}")  # noqa: S608
    response = post_assertion(approver_client, held, credential)
    assert response.status_code == 403, response.content
    held.refresh_from_db()
    assert held.status == Ceremony.Status.PENDING and calls() == []
