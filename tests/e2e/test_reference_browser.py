"""The reference scenario as the README's walkthrough runs it, in Chromium with a virtual
authenticator, against the host's production processes: daphne (dashboard, websocket, passkey
pages) and a Celery worker (Director, agents, gateway), on PostgreSQL and Redis, with the eight
MCPlets over stdio, their backing service and its SMTP sink. Passkeys in localhost mode, `make
run`'s default: each approval on its own loopback port.

Director → information → planning → the store manager approves the plan → dispatch → the manager
approves the e-mail → the mail MCPlet has the host verify the assertion → one e-mail per guest at
risk reaches the SMTP sink. Then every dashboard page is read back with the scenario's data.

With MCPLET_SCREENSHOTS=docs/screenshots it also refreshes the README's pictures."""

import os
from email import policy
from email.parser import BytesParser

import pytest
from playwright.sync_api import expect

from a2a.models import A2AMessage
from agents.models import AgentRun
from held.models import Ceremony
from mcplet_host.audit import verify_chain
from mcplet_host.models import AuditEvent
from tests.browser import screenshot
from tests.dashboard.conftest import PAGES, sign_in
from tests.e2e.walkthrough import (
    approve_the_emails,
    approve_the_plan,
    reference_scripts,
    register_passkey,
    run_director,
)
from tests.processes import celery_worker, daphne, free_port
from tests.restaurant.conftest import (  # noqa: F401 (fixtures)
    backend_url,
    listings,
    outbox,
    passkey_https,
    scenario,
    sent_mail,
)
from tests.restaurant.test_reference_script import at_risk

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]
expect.set_options(timeout=60_000)  # the worker's agents and MCP servers, not a page's render

NAMESPACE = f"reference-e2e-{os.getpid()}"
MANAGER, PASSWORD = "tencho", "pw-manager-1"


@pytest.fixture(scope="module")
def port():
    return free_port()


@pytest.fixture(scope="module")
def host_environment(backend_url, port, tmp_path_factory):  # noqa: F811
    """What `make run` would use, on a port of its own; the reference script fetches the
    forecast from the test's backing service."""
    return {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "MCPLET_TEST_NAMESPACE": NAMESPACE,
        "MCPLET_SCRIPT_DIRS": reference_scripts(tmp_path_factory.mktemp("scripts"), backend_url),
        "MCPLET_LLM_MODEL": "scripted/reference",
        "PASSKEY_MODE": "localhost",
        "PASSKEY_ORIGIN": f"http://localhost:{port}",
        "PASSKEY_RP_ID": "localhost",
        "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
    }


@pytest.fixture(scope="module")
def host(django_db_setup, django_db_blocker, host_environment, port, tmp_path_factory):
    logs = tmp_path_factory.mktemp("host")
    with (
        django_db_blocker.unblock(),
        daphne(logs / "daphne.log", port=port, **host_environment) as url,
        celery_worker(logs / "worker.log", **host_environment),
    ):
        yield url


@pytest.fixture
def reference(scenario, host, django_user_model):  # noqa: F811
    """The seeded scenario, its strict MCPlets verifying with this host, and the store manager
    (staff, may approve) without a passkey yet."""
    for server in scenario["servers"].values():
        if "MCPLET_VERIFY_URL" in server.env:
            server.env |= {"MCPLET_VERIFY_URL": f"{host}/auth/verify-assertion"}
            server.save(update_fields=["env"])
    django_user_model.objects.create_superuser(MANAGER, "tencho@example.jp", PASSWORD)
    return scenario


def test_the_walkthrough_sends_the_campaign_to_exactly_the_guests_at_risk(
    page,
    host,
    reference,
    outbox,  # noqa: F811
):
    guests = at_risk()
    sign_in(page, host, MANAGER, PASSWORD)
    register_passkey(page, host)
    run_director(page, host)
    approve_the_plan(page, host, guests)
    assert sent_mail(outbox) == []  # the plan is approved; nothing has left yet
    approve_the_emails(page, host, guests)
    email = Ceremony.objects.get(tool_name="send_email")
    dispatch = AgentRun.objects.get(agent__agent_id="dispatch-agent")
    page.goto(f"{host}/dashboard/runs/{dispatch.context_id}/")
    expect(page.locator("svg.sequence")).to_contain_text("send_email")
    expect(page.locator("main")).to_contain_text("Success")
    # Who each run acted for: the Director's workflow, through the agents before it.
    chain = "via director → info-gathering-agent → planning-agent"
    expect(page.locator(f"#run-{dispatch.pk} .acts-for")).to_have_text(chain)
    screenshot(page, "walkthrough-5-trace")
    email.refresh_from_db()
    dispatch.refresh_from_db()
    assert email.status == Ceremony.Status.EXECUTED, email.result
    assert dispatch.status == AgentRun.Status.SUCCESS, dispatch.error
    assert dispatch.result["dispatched"] == {"succeeded": 1, "failed": 0}

    # The SMTP sink got one message per guest at risk, each addressed to that guest alone.
    messages = [
        BytesParser(policy=policy.default).parsebytes(f.read_bytes()) for f in sent_mail(outbox)
    ]
    assert sorted((m["To"].addresses[0].display_name, m["X-Envelope-To"]) for m in messages) == (
        sorted((g["name"], g["email"]) for g in guests)
    )
    assert AuditEvent.objects.filter(event_type="mcplet.passkey.verified").count() == 1
    # One workflow, one contextId: every A2A message and every run of the trace.
    contexts = {str(c) for c in A2AMessage.objects.values_list("context_id", flat=True)}
    contexts |= set(AgentRun.objects.values_list("context_id", flat=True))
    assert contexts == {dispatch.context_id}
    checked, broken = verify_chain()
    assert broken is None and checked == AuditEvent.objects.count() > 20

    # Every page of the dashboard, over ASGI with its socket connected, shows what happened.
    for name in PAGES:
        page.goto(f"{host}/dashboard/{'' if name == 'overview' else name + '/'}")
        expect(page.locator("#live")).to_have_attribute("data-state", "live")
        for words in SEEN[name]:
            expect(page.locator("main")).to_contain_text(words)
        screenshot(page, f"dashboard-{name}")
    assert page.problems == []


SEEN = {
    "overview": ["restaurant-mail", "At 07:00 AM", "Nothing waits"],
    "mcplets": ["send_email", "media-pool", "fetch_web_content", "info-pool", "Discover now"],
    "agents": ["info-gathering-agent", "planning-agent", "dispatch-agent", "query_crm"],
    "runs": ["dispatch-agent", "Success"],
    "approvals": ["send_email", "Executed", MANAGER],
    "audit": ["Chain intact", "mcplet.passkey.verified"],
    "control": ["Run Director now", "Pause schedule"],
}
