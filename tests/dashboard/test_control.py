"""Manual control: each action is a CSRF-checked POST, changes one thing and is audited as
`dashboard.<action>` under the operator's name."""

import pytest
from django.test import Client
from django.urls import reverse

from a2a import bus
from agents import runner
from agents.models import AgentRun
from held.models import Ceremony
from mcplet_host.models import AuditEvent
from pools.models import McpServer

pytestmark = pytest.mark.django_db


def action(event_type):
    event = AuditEvent.objects.get(event_type=event_type)
    assert (event.actor_type, event.actor_id) == ("user", "operator")
    return event


def test_run_director_now_enqueues_the_task_and_is_audited(
    staff_client, director, monkeypatch, django_capture_on_commit_callbacks
):
    queued = []
    monkeypatch.setattr(
        "dashboard.controls.enqueue", lambda name, args, **o: queued.append((name, args, o))
    )
    url = reverse("dashboard:run-director", args=[director.pk])
    with django_capture_on_commit_callbacks(execute=True):
        response = staff_client.post(url, HTTP_ACCEPT="application/json")
    answer = response.json()
    assert answer["ok"] and answer["director"] == "director"
    assert queued == [("agents.run_director", ["director"], {"task_id": answer["task"]})]
    assert action("dashboard.run_director").details == {"agent": "director", "task": answer["task"]}


def test_without_script_an_action_redirects_with_a_message(staff_client, director, monkeypatch):
    monkeypatch.setattr("dashboard.controls.enqueue", lambda *a, **o: None)
    url = reverse("dashboard:run-director", args=[director.pk])
    response = staff_client.post(url, {"next": "/dashboard/"}, follow=True)
    assert response.redirect_chain == [("/dashboard/", 302)]
    assert "A cycle of director is queued" in response.content.decode()
    # An open redirect is not followed: back to Control instead.
    response = staff_client.post(url, {"next": "https://evil.example/"})
    assert response["Location"] == reverse("dashboard:control")


def test_a_disabled_director_is_not_run(staff_client, director, monkeypatch):
    monkeypatch.setattr("dashboard.controls.enqueue", pytest.fail)
    director.enabled = False
    director.save()
    url = reverse("dashboard:run-director", args=[director.pk])
    answer = staff_client.post(url, HTTP_ACCEPT="application/json").json()
    assert not answer["ok"] and "disabled" in answer["message"]
    assert action("dashboard.run_director").result == "FAILURE"


@pytest.mark.django_db(transaction=True)
def test_run_director_now_runs_a_cycle(staff_client, director, script, eager):
    director.model = script(
        {
            "director": [
                {"json": {"target": "info-gathering-agent", "instruction": "Collect the weather"}}
            ],
            "info-gathering-agent": [{"json": {"weather": "rain"}}],
        }
    )
    director.save()
    director.targets.update(model=director.model)
    staff_client.post(reverse("dashboard:run-director", args=[director.pk]))
    types = list(AuditEvent.objects.order_by("seq").values_list("event_type", flat=True))
    # The operator's action first, then what the cycle did.
    assert types.index("dashboard.run_director") < types.index("director.cycle.ran")
    assert AgentRun.objects.get().status == AgentRun.Status.SUCCESS


def test_pause_and_resume_a_schedule(staff_client, director):
    url = reverse("dashboard:schedule", args=[director.pk])
    staff_client.post(url, {"enabled": "0"})
    director.schedule.refresh_from_db()
    assert not director.schedule.enabled
    assert action("dashboard.pause_schedule").details == {
        "agent": "director",
        "schedule": "Director director",
    }
    staff_client.post(url, {"enabled": "1"})
    director.schedule.refresh_from_db()
    assert director.schedule.enabled
    action("dashboard.resume_schedule")


def test_enable_and_disable_an_agent_and_a_server(staff_client, registry):
    info, server = registry["info"], registry["server"]
    staff_client.post(reverse("dashboard:agent-enabled", args=[info.pk]), {"enabled": "0"})
    info.refresh_from_db()
    assert not info.enabled
    assert action("dashboard.disable_agent").details == {"agent": "info-gathering-agent"}
    staff_client.post(reverse("dashboard:server-enabled", args=[server.pk]), {"enabled": "0"})
    server.refresh_from_db()
    assert not server.enabled
    assert action("dashboard.disable_server").target_server == "reference"
    staff_client.post(reverse("dashboard:server-enabled", args=[server.pk]), {"enabled": "1"})
    server.refresh_from_db()
    assert server.enabled
    action("dashboard.enable_server")


@pytest.mark.django_db(transaction=True)
def test_cancel_a_run_waiting_for_approval(staff_client, registry, script, eager):
    dispatch = registry["dispatch"]
    email = {"to": ["sato@example.jp"], "body": "x"}
    dispatch.model = script(
        {"dispatch-agent": [{"json": {"actions": [{"tool": "send_email", "arguments": email}]}}]}
    )
    dispatch.save()
    request = bus.send_task("planning-agent", "dispatch-agent", {"plan": "x"})
    run = AgentRun.objects.get(request=request)
    assert run.status == AgentRun.Status.AWAITING_APPROVAL

    staff_client.post(reverse("dashboard:cancel-run", args=[run.pk]))

    run.refresh_from_db()
    assert run.status == AgentRun.Status.CANCELLED
    assert "Cancelled by operator from the dashboard" in run.error["message"]
    assert run.waiting_for.status == Ceremony.Status.REJECTED  # nothing of it executes
    assert run.waiting_for.decided_by.get_username() == "operator"
    denied = AuditEvent.objects.get(event_type="PERMISSION_DENIED")
    assert (denied.actor_type, denied.actor_id) == ("user", "operator")  # who rejected it
    event = action("dashboard.cancel_run")
    assert (event.trace_id, event.result) == (run.context_id, "SUCCESS")

    again = staff_client.post(reverse("dashboard:cancel-run", args=[run.pk]), follow=True)
    assert "had already ended" in again.content.decode()
    assert AuditEvent.objects.filter(event_type="dashboard.cancel_run").first().result == "FAILURE"


def test_cancel_a_running_run(staff_client, registry):
    request = bus.send_task("planning-agent", "info-gathering-agent", {"x": 1})  # not delivered
    run = runner.start(request, registry["info"])
    staff_client.post(reverse("dashboard:cancel-run", args=[run.pk]))
    run.refresh_from_db()
    assert run.status == AgentRun.Status.CANCELLED


def test_discover_now(staff_client, registry):
    server = registry["server"]
    response = staff_client.post(reverse("dashboard:discover", args=[server.pk]), follow=True)
    assert "reference: 7 accepted, 0 rejected, 0 evicted" in response.content.decode()
    assert action("dashboard.discover_server").details == {
        "accepted": 7,
        "rejected": 0,
        "evicted": 0,
    }

    down = McpServer.objects.create(name="down", transport="http", url="http://127.0.0.1:9/mcp")
    response = staff_client.post(reverse("dashboard:discover", args=[down.pk]), follow=True)
    assert "down did not answer" in response.content.decode()
    failed = AuditEvent.objects.filter(event_type="dashboard.discover_server").first()
    assert (failed.result, failed.target_server) == ("FAILURE", "down")


def test_actions_need_post_and_a_csrf_token(registry, staff_client, django_user_model):
    server = registry["server"]
    url = reverse("dashboard:server-enabled", args=[server.pk])
    assert staff_client.get(url).status_code == 405
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(django_user_model.objects.get(username="operator"))
    assert strict.post(url, {"enabled": "0"}).status_code == 403
    server.refresh_from_db()
    assert server.enabled
    assert not AuditEvent.objects.filter(event_type__startswith="dashboard.").exists()
