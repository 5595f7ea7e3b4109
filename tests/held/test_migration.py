"""Held calls moved from `passkey` to `held` (their table stayed): rows held before the move
keep working — their grants, their kind, the run waiting on them."""

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE = [("passkey", "0007_ceremony_form_elicitation"), ("agents", "0007_remote_a2a_agents")]


@pytest.mark.django_db(transaction=True)
def test_rows_held_before_the_move_keep_working():
    executor = MigrationExecutor(connection)
    executor.migrate([("held", None)])  # back to the state before the move
    old = MigrationExecutor(connection).loader.project_state(BEFORE).apps
    OldCeremony = old.get_model("passkey", "Ceremony")
    call = {
        "nonce": "n",
        "agent_id": "dispatch-agent",
        "tool_name": "send_email",
        "surface": "app",
        "arguments": {"to": "a@example.jp"},
        "arguments_hash": "h",
        "enforcement": "strict",
        "expires_at": timezone.now(),
    }
    first = OldCeremony.objects.create(token="first", status="outcome_unknown", **call)
    OldCeremony.objects.create(token="again", rerun_of=first, **call)
    approve = old.get_model("auth", "Permission").objects.get(
        codename="approve_ceremony", content_type__app_label="passkey"
    )
    approver = old.get_model("auth", "User").objects.create(username="manager")
    approver.user_permissions.add(approve)

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    from held.models import Ceremony

    assert User.objects.get(username="manager").has_perm("held.approve_ceremony")
    assert Permission.objects.filter(codename="approve_ceremony").count() == 1
    again = Ceremony.objects.get(token="again")
    assert (again.kind, again.rerun_of.token, again.idempotency_key) == ("rerun", "first", "first")
    assert Ceremony.objects.get(token="first").rules.may_run_again
