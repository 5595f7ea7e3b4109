"""The dashboard's control actions when refused, proved from the MCP server's own call log
(issue 14): the Director's cycle would have its target call a tool, and the cancelled run's
held e-mail would reach the server, so anything that ran shows in the log. Tasks run eagerly:
whatever a refused action had queued would have run inside the request."""

import pytest
from django.test import Client
from django.urls import reverse

from a2a import bus
from agents.models import AgentRun
from held import lifecycle
from held.models import Ceremony
from mcplet_host.models import AuditEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

CRM = {"name": "query_crm", "arguments": {"filter": "rain"}}


@pytest.fixture
def cycle(director, script):
    """The Director's cycle sends the information agent a task whose first turn calls query_crm."""
    model = script(
        {
            "director": [{"json": {"target": "info-gathering-agent", "instruction": "Weather"}}],
            "info-gathering-agent": [{"tool_calls": [CRM]}, {"json": {"weather": "rain"}}],
        }
    )
    director.model = model
    director.save()
    director.targets.update(model=model)
    return reverse("dashboard:run-director", args=[director.pk])


def test_the_control_staff_running_the_director_calls_the_tool(staff_client, cycle, calls):
    assert staff_client.post(cycle, HTTP_ACCEPT="application/json").json()["ok"]
    assert [c["name"] for c in calls()] == ["query_crm"]


def test_signed_in_without_staff_rights(cycle, calls, django_user_model):
    client = Client()
    client.force_login(django_user_model.objects.create_user("guest", "g@example.org", "pw-g-1"))
    assert client.post(cycle).status_code == 403
    assert calls() == [] and not AgentRun.objects.exists()
    refusal = AuditEvent.objects.get(event_type="dashboard.run_director")
    assert (refusal.result, refusal.actor_id) == ("BLOCKED", "guest")


def test_anonymous(client, cycle, calls):
    response = client.post(cycle)
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert calls() == [] and not AgentRun.objects.exists()


def test_without_a_csrf_token(staff_client, cycle, calls, django_user_model):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(django_user_model.objects.get(username="operator"))
    assert strict.post(cycle).status_code == 403
    assert calls() == [] and not AgentRun.objects.exists()


def test_a_disabled_director(staff_client, director, cycle, calls):
    director.enabled = False
    director.save()
    answer = staff_client.post(cycle, HTTP_ACCEPT="application/json").json()
    assert not answer["ok"] and "disabled" in answer["message"]
    assert calls() == [] and not AgentRun.objects.exists()
    event = AuditEvent.objects.get(event_type="dashboard.run_director")
    assert event.result == "FAILURE" and event.details["reason"] == "disabled"


def test_a_cancelled_runs_held_call_never_reaches_the_server(
    staff_client, registry, script, calls, admin_user
):
    email = {"to": ["sato@example.jp"], "body": "x"}
    registry["dispatch"].model = script(
        {"dispatch-agent": [{"json": {"actions": [{"tool": "send_email", "arguments": email}]}}]}
    )
    registry["dispatch"].save()
    run = AgentRun.objects.get(request=bus.send_task("planning-agent", "dispatch-agent", {}))
    assert run.status == AgentRun.Status.AWAITING_APPROVAL

    staff_client.post(reverse("dashboard:cancel-run", args=[run.pk]))

    ceremony = Ceremony.objects.get(pk=run.waiting_for_id)
    assert ceremony.status == Ceremony.Status.REJECTED
    # A late approval changes nothing, and a redelivered resume runs nothing.
    assert not ceremony.approve(admin_user, assertion={"type": "passkey_assertion"})
    lifecycle.resume(ceremony.pk)
    assert calls() == []
