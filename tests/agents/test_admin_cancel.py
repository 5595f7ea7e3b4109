"""Admin's *Cancel the selected runs*: the run ends cancelled, the call it waits for is
rejected by the operator who cancelled it (the audit names them), and nothing of it runs."""

import pytest

from a2a import bus
from agents.models import AgentRun
from held.models import Ceremony
from mcplet_host.models import AuditEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]


def test_admins_cancel_names_who_rejected_the_held_call(
    admin_client, admin_user, registry, script, calls
):
    dispatch = registry["dispatch"]
    email = {"to": ["sato@example.jp"], "body": "x"}
    dispatch.model = script(
        {"dispatch-agent": [{"json": {"actions": [{"tool": "send_email", "arguments": email}]}}]}
    )
    dispatch.save()
    run = AgentRun.objects.get(request=bus.send_task("planning-agent", "dispatch-agent", {}))
    assert run.status == AgentRun.Status.AWAITING_APPROVAL

    action = {"action": "cancel_runs", "_selected_action": [str(run.pk)]}
    assert admin_client.post("/admin/agents/agentrun/", action).status_code == 302

    run.refresh_from_db()
    assert run.status == AgentRun.Status.CANCELLED
    assert run.waiting_for.status == Ceremony.Status.REJECTED
    denied = AuditEvent.objects.get(event_type="PERMISSION_DENIED")
    assert denied.actor_id == admin_user.get_username()
    assert calls() == []
