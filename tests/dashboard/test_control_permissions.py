"""Staff status shows the dashboard; each control changes a model and needs Django's change
permission on it (issue 14, reproduction 6): without it the button is not shown, and a POST is
a 403 that changes nothing and is audited."""

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from a2a import bus
from agents import runner
from agents.models import Agent, AgentRun
from mcplet_host.models import AuditEvent
from pools.models import McpServer

pytestmark = pytest.mark.django_db

CONTROLS = {
    "run-director": ("agents.change_agent", "director"),
    "schedule": ("django_celery_beat.change_periodictask", "director"),
    "agent-enabled": ("agents.change_agent", "agent"),
    "server-enabled": ("pools.change_mcpserver", "server"),
    "discover": ("pools.change_mcpserver", "server"),
    "cancel-run": ("agents.change_agentrun", "run"),
}
BUTTONS = ["Run Director now", "Disable</button>", "Cancel run", "Discover now</button>"]


@pytest.fixture
def objects():
    agent = Agent.objects.create(agent_id="info-gathering-agent")
    director = Agent.objects.create(agent_id="director", kind=Agent.Kind.DIRECTOR)
    server = McpServer.objects.create(name="down", transport="http", url="http://127.0.0.1:9/mcp")
    run = runner.start(bus.send_task("director", agent.agent_id, {}), agent)
    return {"agent": agent, "director": director, "server": server, "run": run}


@pytest.fixture
def viewer(client, django_user_model):
    user = django_user_model.objects.create_user("viewer", password="pw-viewer-1", is_staff=True)
    client.force_login(user)
    client.user = user
    return client


def state(objects):
    agent, server, run = objects["agent"], objects["server"], objects["run"]
    for row in (agent, server, run):
        row.refresh_from_db()
    return agent.enabled, server.enabled, server.status, run.status


@pytest.mark.parametrize("name", CONTROLS)
def test_staff_without_the_permission_are_refused(viewer, objects, name):
    permission, target = CONTROLS[name]
    before = state(objects)
    response = viewer.post(reverse(f"dashboard:{name}", args=[objects[target].pk]), {"enabled": 0})
    assert response.status_code == 403
    assert state(objects) == before
    assert AgentRun.objects.get().status == AgentRun.Status.RUNNING
    event = AuditEvent.objects.get(event_type__startswith="dashboard.")
    assert (event.actor_id, event.result) == ("viewer", "BLOCKED")
    assert event.details["permission"] == permission


def test_without_permissions_no_control_button_is_shown(viewer, objects):
    pages = "".join(
        viewer.get(reverse(f"dashboard:{page}")).content.decode()
        for page in ("control", "mcplets", "runs")
    )
    assert not [button for button in BUTTONS if button in pages]


def test_with_the_permissions_the_buttons_work(viewer, objects):
    codenames = ["change_agent", "change_mcpserver", "change_agentrun"]
    viewer.user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    pages = "".join(
        viewer.get(reverse(f"dashboard:{page}")).content.decode()
        for page in ("control", "mcplets", "runs")
    )
    assert [button for button in BUTTONS if button in pages] == BUTTONS
    url = reverse("dashboard:agent-enabled", args=[objects["agent"].pk])
    assert viewer.post(url, {"enabled": "0"}).status_code == 302
    assert state(objects)[0] is False
