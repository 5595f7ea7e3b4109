"""The dashboard, admin and live socket as anonymous visitors, signed-in non-staff users,
inactive staff, and staff without the model permissions a control needs. Pages are refused
(nothing to run, so not audited); every control POST is refused and audited, and nothing runs
(the Director, run by a permitted operator, would make the information agent call
query_crm)."""

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from a2a import bus
from agents.models import Agent, AgentRun
from mcplet_host.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

PAGES = ["overview", "mcplets", "agents", "runs", "approvals", "audit", "audit-export", "control"]
ADMIN = [
    "/admin/",
    "/admin/agents/agent/",
    "/admin/pools/pool/add/",
    "/admin/a2a/partnerkey/",
    "/admin/mcplet_host/auditevent/",
    "/admin/held/ceremony/",
]


@pytest.fixture
def setup(world, script):
    world.info.model = script(
        {
            "director": [{"json": {"target": "info-gathering-agent", "instruction": "go"}}],
            "info-gathering-agent": [
                {"tool_calls": [{"name": "query_crm", "arguments": {"filter": "rain"}}]},
                {"text": "done"},
            ],
        }
    )
    world.info.save()
    director = Agent.objects.create(
        agent_id="director",
        kind=Agent.Kind.DIRECTOR,
        model=world.info.model,
        prompt_template="Plan.",
        backoff_seconds=0,
    )
    director.targets.add(world.info)
    # Delivered at once (eager tasks): its run exists, and is set running below.
    run = AgentRun.objects.get(request=bus.send_task("planning-agent", "info-gathering-agent", {}))
    AgentRun.objects.filter(pk=run.pk).update(status=AgentRun.Status.RUNNING)
    world.controls = {
        "run-director": director.pk,
        "agent-enabled": world.info.pk,
        "server-enabled": world.server.pk,
        "discover": world.server.pk,
        "cancel-run": run.pk,
    }
    world.run = run
    return world


def users():
    made = {"anonymous": None}
    made["customer"] = User.objects.create_user("customer", password="pw-customer-1")
    made["inactive staff"] = User.objects.create_user(
        "retired", password="pw-retired-1", is_staff=True, is_active=False
    )
    made["staff without permissions"] = User.objects.create_user(
        "viewer", password="pw-viewer-1", is_staff=True
    )
    return made


def client_for(user):
    client = Client()
    client.raise_request_exception = False
    if user is not None:
        client.force_login(user)
    return client


def test_the_harness_sees_the_director_run(setup, admin_client, mcp):
    before = len(mcp.calls())
    url = reverse("dashboard:run-director", args=[setup.controls["run-director"]])
    assert admin_client.post(url).status_code == 302
    assert [c["name"] for c in mcp.calls()[before:]] == ["query_crm"]


def test_pages_and_controls(setup, attempts):
    for who, user in users().items():
        client = client_for(user)
        if who != "staff without permissions":
            for page in PAGES:
                with attempts.refused(f"{who}: {page}", audited=False):
                    response = client.get(reverse(f"dashboard:{page}"))
                    assert response.status_code in (302, 403), (who, page)
                    assert b"query_crm" not in response.content
            for path in ADMIN:
                with attempts.refused(f"{who}: {path}", audited=False):
                    response = client.get(path)
                    assert response.status_code == 302 and "/admin/login/" in response.url
        for name, pk in setup.controls.items():
            with attempts.refused(f"{who}: POST {name}", event_type__startswith="dashboard."):
                response = client.post(reverse(f"dashboard:{name}", args=[pk]), {"enabled": "0"})
                assert response.status_code in (302, 403), (who, name)
    setup.info.refresh_from_db(), setup.server.refresh_from_db(), setup.run.refresh_from_db()
    assert setup.info.enabled and setup.server.enabled
    assert setup.run.status == AgentRun.Status.RUNNING


def connects(headers):
    async def attempt():
        socket = WebsocketCommunicator(application, "/ws/dashboard/", headers=headers)
        connected, _ = await socket.connect(timeout=10)
        await socket.disconnect()
        return connected

    return async_to_sync(attempt)()


@pytest.mark.services
def test_the_live_socket(setup, attempts):
    def headers(user, origin=b"http://localhost:8000"):
        found = [(b"host", b"localhost:8000"), (b"origin", origin)]
        if user is not None:
            cookie = client_for(user).cookies[settings.SESSION_COOKIE_NAME].value
            found.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
        return found

    made = users()
    for who, user in made.items():
        if who != "staff without permissions":
            with attempts.refused(f"{who}: the live socket", audited=False):
                assert not connects(headers(user))
    staff = made["staff without permissions"]
    for origin in (b"http://evil.example", b"http://localhost:9999", b"null"):
        with attempts.refused(f"staff from {origin.decode()}", audited=False):
            assert not connects(headers(staff, origin))
    assert connects(headers(staff))  # the control: the staff member's own page connects
