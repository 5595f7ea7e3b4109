"""A real Prometheus (Debian's package) scrapes the host while the reference scenario runs end to
end as an operator runs it: `manage.py serve` (two web processes) and a Celery worker count into
one PROMETHEUS_MULTIPROC_DIR; `manage.py seed_reference --discover` sets the restaurant up; the
operator presses the dashboard's "Run Director now"; the store manager approves the plan, then
the e-mail, each with a passkey ceremony on the host's pages (a software authenticator over
HTTP); the dispatch agent's e-mails reach the backing service's outbox. Then Prometheus's HTTP
API answers with what happened, in figures that follow from the scenario (the reference script
and the eight MCPlets), not from the host's code."""

import os
import time
from collections import Counter

import pytest
from django.contrib.auth import get_user_model

from agents.models import Agent, AgentRun
from held.models import Ceremony
from mcplet_host.models import AuditEvent
from mcplets.restaurant import SERVERS
from tests.e2e.walkthrough import reference_scripts
from tests.passkey.authenticator import SoftAuthenticator
from tests.processes import free_port, manage, signed_in, wait_until
from tests.prometheus import query, scraped, scraped_host
from tests.restaurant.conftest import backend_url, outbox, sent_mail  # noqa: F401 (fixtures)
from tests.restaurant.test_reference_script import at_risk

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

NAMESPACE = f"metrics-reference-{os.getpid()}"
READING = 1.5  # seconds the store manager spends on each approval page before approving
# What the reference script's agents call (agents/scripts/reference.yaml), on which server and
# in which pool (mcplets/restaurant): information 5, planning 1, dispatch 1, then the e-mail.
CALLED = {
    ("fetch_web_content", "restaurant-web", "info-pool"): 1,
    ("call_external_api", "restaurant-external-api", "info-pool"): 1,
    ("query_crm", "restaurant-crm", ""): 2,
    ("query_erp", "restaurant-erp", ""): 2,  # information, then planning
    ("read_site_stats", "restaurant-site-stats", "media-pool"): 1,
    ("send_email", "restaurant-mail", "media-pool"): 1,  # once approved
}


@pytest.fixture
def host(tmp_path, backend_url, outbox):  # noqa: F811
    """(web URL, Prometheus URL, the host's environment): the scripted reference model fetching
    the forecast from the test's backing service, passkeys on the host's own origin; the outbox
    set before the processes start (the mail MCPlet inherits the worker's environment)."""
    port = free_port()
    (tmp_path / "scripts").mkdir()
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "MCPLET_TEST_NAMESPACE": NAMESPACE,
        # Every process of the host counts here, `seed_reference` too (compose: the app's env).
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "MCPLET_SCRIPT_DIRS": reference_scripts(tmp_path / "scripts", backend_url),
        "MCPLET_LLM_MODEL": "scripted/reference",
        "PASSKEY_MODE": "https",
        "PASSKEY_ORIGIN": f"http://localhost:{port}",
        "PASSKEY_RP_ID": "localhost",
        "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
    }
    with scraped_host(tmp_path, env, port=port) as (web, prometheus):
        yield web, prometheus, env


class StoreManager:
    """A person at the host's pages: signed in, a passkey registered on /passkey/register/,
    approving a held call on its page as the page's script does (challenge, then the signed
    assertion from the page's origin)."""

    def __init__(self, browser, origin):
        self.browser, self.origin, self.key = browser, origin, SoftAuthenticator()
        options = self.post("/passkey/register/options/").json()
        credential = self.key.create(options, origin)
        registered = self.post(
            "/passkey/register/verify/", {"name": "phone", "credential": credential}
        )
        assert registered.status_code == 201, registered.text

    def post(self, path, body=None, **headers):
        response = self.browser.post(path, json=body or {}, headers=headers)
        assert response.status_code < 400, (path, response.status_code, response.text[-2000:])
        return response

    def approve(self, ceremony):
        page = f"/passkey/ceremonies/{ceremony.token}/"
        assert self.browser.get(page).status_code == 200
        time.sleep(READING)
        options = self.post(page + "challenge/").json()
        self.post(page + "assertion/", self.key.get(options, self.origin), Origin=self.origin)


@pytest.fixture
def manager(host):
    """The store manager (may approve), signed in at the host, with a passkey."""
    web, _, env = host
    user = get_user_model().objects.create_superuser("tencho", "tencho@example.jp", "pw-1")
    with signed_in(web, user) as browser:
        yield StoreManager(browser, env["PASSKEY_ORIGIN"])


def held(kind):
    """The held call of `kind`, once the worker asks for it."""
    wait_until(
        lambda: Ceremony.objects.pending().filter(kind=kind).exists(),
        f"a pending {kind} approval",
        timeout=90,
    )
    return Ceremony.objects.pending().get(kind=kind)


def test_prometheus_sees_the_reference_scenario(host, manager, backend_url, outbox):  # noqa: F811
    _, prometheus, env = host
    started = time.monotonic()
    seeded = manage("seed_reference", "--api-url", backend_url, "--discover", **env)
    assert seeded.returncode == 0 and "Reference scenario ready." in seeded.stdout, seeded.stderr

    # The operator: Control › Run Director now (queued for the worker).
    director = Agent.objects.get(agent_id="director")
    asked = time.monotonic()
    ran = manager.post(
        f"/dashboard/control/directors/{director.pk}/run/", Accept="application/json"
    )
    assert ran.json()["ok"], ran.text

    # The plan waits for the store manager: one held result, its run waiting with it.
    plan = held(Ceremony.Kind.RESULT)
    scraped(prometheus, "mcplet_approvals_pending > 0", [({"kind": "result"}, 1)], exactly=True)
    waiting = [({"state": "running"}, 0), ({"state": "awaiting_approval"}, 1)]
    scraped(prometheus, "mcplet_agent_runs", waiting)  # information ended, planning waits
    plan_approving = time.monotonic()
    manager.approve(plan)
    plan_decided = time.monotonic()

    # Dispatch proposes the e-mail: held for the passkey, nothing sent before it.
    email = held(Ceremony.Kind.TOOL_CALL)
    assert email.tool_name == "send_email"
    scraped(prometheus, "mcplet_agent_runs", waiting)  # planning ended, dispatch waits
    scraped(prometheus, "mcplet_approvals_pending > 0", [({"kind": "tool_call"}, 1)], exactly=True)
    scraped(
        prometheus,
        'mcplet_tool_calls_total{outcome="held"}',
        [({"tool": "send_email", "pool": "media-pool", "outcome": "held"}, 1)],
        exactly=True,
    )
    assert sent_mail(outbox) == []
    manager.approve(email)
    email_decided = time.monotonic()
    wait_until(
        lambda: AgentRun.objects.filter(
            agent__agent_id="dispatch-agent", status__in=AgentRun.FINAL
        ).exists(),
        "the dispatch run to end",
        timeout=90,
    )
    dispatch = AgentRun.objects.get(agent__agent_id="dispatch-agent")
    assert dispatch.status == AgentRun.Status.SUCCESS, dispatch.error
    assert len(sent_mail(outbox)) == len(at_risk()) == 10  # one e-mail per guest at risk

    # Discovery (the seed's) accepted each MCPlet's one tool.
    scraped(
        prometheus,
        "mcplet_discovery_verdicts_total",
        [({"server": info.name, "verdict": "accepted"}, 1) for info in SERVERS],
        exactly=True,
    )
    # Every tool the script calls, once approved the e-mail too; nothing refused, nothing failed.
    scraped(
        prometheus,
        'mcplet_tool_calls_total{outcome="success"}',
        [({"tool": t, "pool": p, "outcome": "success"}, n) for (t, _, p), n in CALLED.items()],
        exactly=True,
    )
    assert query(prometheus, 'mcplet_tool_calls_total{outcome=~"refused|error"}') == {}
    assert query(prometheus, "mcplet_gateway_refusals_total") == {}
    # Each call's MCP request, timed on the server that answered it, with no error.
    durations = scraped(
        prometheus,
        "mcp_client_operation_duration_seconds_count",
        [
            (
                {
                    "mcp_method_name": "tools/call",
                    "gen_ai_tool_name": t,
                    "server": s,
                    "error_type": "",
                },
                n,
            )
            for (t, s, _), n in CALLED.items()
        ],
        exactly=True,
    )
    assert sum(durations.values()) == 8
    took = query(prometheus, "sum(mcp_client_operation_duration_seconds_sum)")[()]
    assert 0 < took < time.monotonic() - started

    # Two approvals, both approved by the person; the time each took spans their reading, and
    # fits between the call's holding (not before the step that held it) and the decision.
    scraped(
        prometheus,
        "mcplet_approvals_decided_total",
        [
            ({"kind": "result", "decision": "approved"}, 1),
            ({"kind": "tool_call", "decision": "approved"}, 1),
        ],
        exactly=True,
    )
    scraped(
        prometheus,
        "mcplet_approval_decision_seconds_count",
        [
            ({"kind": "result", "decision": "approved"}, 1),
            ({"kind": "tool_call", "decision": "approved"}, 1),
        ],
        exactly=True,
    )
    waited = query(prometheus, "mcplet_approval_decision_seconds_sum")
    for kind, before, decided in (
        ("result", asked, plan_decided),
        ("tool_call", plan_approving, email_decided),
    ):
        (took,) = [v for labels, v in waited.items() if ("kind", kind) in labels]
        assert READING <= took <= decided - before, (kind, took)
    scraped(prometheus, "mcplet_approvals_pending > 0", [], exactly=True)

    # The runs: information, planning and dispatch ended well (the Director's cycle is no agent
    # run); nothing runs or waits any more.
    scraped(
        prometheus, "mcplet_agent_runs_finished_total", [({"state": "success"}, 3)], exactly=True
    )
    scraped(
        prometheus,
        "mcplet_agent_runs",
        [({"state": "running"}, 0), ({"state": "awaiting_approval"}, 0)],
        exactly=True,
    )
    # Three task requests on the bus (Director → information → planning → dispatch), each
    # delivered once.
    scraped(
        prometheus,
        "mcplet_bus_messages_total",
        [({"outcome": "sent"}, 3), ({"outcome": "delivered"}, 3)],
        exactly=True,
    )
    # The audit chain: one event per executed call, per held call and per person's approval, the
    # MCPlets discovery accepted, the mail MCPlet's verified assertion, the operator's "Run now".
    scraped(
        prometheus,
        "mcplet_audit_events_total",
        [
            ({"event_type": "TOOL_EXECUTED"}, 8),
            ({"event_type": "mcplet.approval.requested"}, 2),
            ({"event_type": "PERMISSION_GRANTED"}, 2),
            ({"event_type": "mcplet.passkey.verified"}, 1),
            ({"event_type": "mcplet.tool.accepted"}, len(SERVERS)),
            ({"event_type": "dashboard.run_director"}, 1),
            ({"event_type": "director.cycle.ran"}, 1),
            ({"event_type": "agent.run.finished"}, 3),
        ],
    )
    # And every event the host's processes appended, whichever process did: all the chain holds
    # but the test's own making of the store manager's account (this process counts nowhere).
    chain = Counter(AuditEvent.objects.values_list("event_type", flat=True))
    chain -= Counter({"mcplet.config.user.created": 1})
    counted = query(prometheus, "mcplet_audit_events_total")
    assert counted == {(("event_type", t),): float(n) for t, n in chain.items()}
