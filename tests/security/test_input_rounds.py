"""MCP 2026-07-28 input rounds: a form or a step a server asks for before it answers is a
person's to give — never an LLM's, a partner's, or a user's who may not approve — and a held
call's `requestState` goes back only with that call's own retry, once.

Each attempt: the held call is still waiting (or settled, for a replay), and the MCP server's
own log shows no retry."""

from types import SimpleNamespace

import pytest
from django.test import Client

from a2a.models import PartnerKey
from agents.models import Agent
from held import lifecycle
from held.models import Ceremony
from mcplet_host import gateway
from mcplet_host.authority import Authority
from mcplets.examples.programmable import serve_http, write_spec
from pools.discovery import discover
from pools.models import McpServer, Pool
from tests.conftest import Calls, entry
from tests.passkey import conftest as passkey

approver, approver_client, passkey_settings = (
    passkey.approver,
    passkey.approver_client,
    passkey.passkey_settings,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

TABLE = {
    "type": "object",
    "properties": {"guests": {"type": "integer", "minimum": 1, "maximum": 12}},
    "required": ["guests"],
}
FORM = {
    "table": {
        "method": "elicitation/create",
        "params": {"mode": "form", "message": "How many guests?", "requestedSchema": TABLE},
    }
}
STEP = {
    "login": {
        "method": "elicitation/create",
        "params": {"mode": "url", "message": "Sign in", "url": "https://id.bistro.example/in"},
    }
}
REFUSED = {"event_type": "mcplet.passkey.refused"}


@pytest.fixture(scope="module")
def mcp(tmp_path_factory):
    """A 2026-07-28-only server whose tools ask a form or a step first."""
    folder = tmp_path_factory.mktemp("rounds")
    tools = [
        entry("book_table", pool="bistro-pool") | {"inputRequired": [FORM]},
        entry("sign_in", pool="bistro-pool") | {"inputRequired": [STEP]},
    ]
    calls = Calls(folder / "calls.jsonl")
    with serve_http(
        write_spec(folder / "tools.json", tools), calls_log=calls.path, protocols="2026"
    ) as url:
        yield SimpleNamespace(url=url, calls=calls)


@pytest.fixture
def world(mcp):
    pool = Pool.objects.create(name="bistro-pool")
    discover(McpServer.objects.create(name="bistro", transport="http", url=mcp.url))
    agent = Agent.objects.create(agent_id="planning-agent", display_name="Planning")
    agent.accessible_pools.set([pool])
    partner = Agent.objects.create(agent_id="partner-bot", kind=Agent.Kind.EXTERNAL)
    partner.accessible_pools.set([pool])
    _, raw_key = PartnerKey.issue(partner, "security")
    return SimpleNamespace(agent=agent, raw_key=raw_key)


def hold(world, tool="book_table", day="friday"):
    authority = Authority("partner-bot", ("director",))
    outcome = gateway.call_tool(world.agent, tool, {"day": day}, authority=authority)
    assert outcome.status == "pending", outcome.envelope
    return outcome.ceremony


def still_waiting(ceremony):
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.PENDING
    lifecycle.resume(ceremony.pk)  # as a worker would: nothing to send


def test_nobody_but_an_approver_answers_a_form(
    world, approver, approver_client, django_user_model, attempts
):
    held = hold(world)
    answer_url, answer = f"{held.get_absolute_url()}answer/", {"action": "accept", "guests": "2"}
    outsider = Client()
    outsider.force_login(django_user_model.objects.create_user("viewer", "v@example.org", "pw"))
    no_csrf = Client(enforce_csrf_checks=True)
    no_csrf.force_login(approver)
    partner = {"HTTP_AUTHORIZATION": f"Bearer {world.raw_key}"}
    for label, (client, body, headers, status, event) in {
        "a user who may not approve": (outsider, answer, {}, 403, REFUSED),
        "an answer outside the form's schema": (
            approver_client,
            {"action": "accept", "guests": "40"},
            {},
            400,
            REFUSED,
        ),
        "an answer that is no answer": (
            approver_client,
            {"action": "fill-it-in"},
            {},
            400,
            REFUSED,
        ),
        "anonymous": (Client(), answer, {}, 401, None),
        "a partner's API key": (Client(), answer, partner, 401, None),
        "a signed-in approver without the page's CSRF token": (no_csrf, answer, {}, 403, None),
    }.items():
        with attempts.refused(label, audited=event is not None, **(event or {})):
            assert client.post(answer_url, body, **headers).status_code == status
            still_waiting(held)


def test_an_llm_cannot_answer_or_approve_a_form(world, approver, attempts):
    """The model only names tools: none answers a form; a form is never approved into a call."""
    held = hold(world)
    with attempts.refused("the model names a tool that would answer", event_type="TOOL_BLOCKED"):
        outcome = gateway.call_tool(world.agent, "answer", {"ceremony": held.token, "guests": 2})
        assert outcome.status == "refused"
        still_waiting(held)
    with attempts.refused("a form approved like a call", audited=False):
        assert not held.approve(approver)
        still_waiting(held)


def test_a_state_goes_back_once_and_only_with_its_own_call(world, approver_client, attempts):
    one, two = hold(world, "sign_in", "friday"), hold(world, "sign_in", "saturday")
    form, declined = hold(world), hold(world, day="sunday")
    approver_client.post(f"{one.get_absolute_url()}step/", {"action": "finished"})
    one.refresh_from_db()
    assert one.status == Ceremony.Status.EXECUTED
    with attempts.refused("the finished step finished again", audited=False):
        approver_client.post(f"{one.get_absolute_url()}step/", {"action": "finished"})
        lifecycle.resume(one.pk)
        still_waiting(two)
    with attempts.refused("'I have finished' on a form", audited=False):
        assert (
            approver_client.post(
                f"{form.get_absolute_url()}step/", {"action": "finished"}
            ).status_code
            == 404
        )
        still_waiting(form)
    with attempts.refused("a declined form's call resumed", event_type="PERMISSION_DENIED"):
        approver_client.post(f"{declined.get_absolute_url()}answer/", {"action": "decline"})
        lifecycle.resume(declined.pk)
        declined.refresh_from_db()
        assert declined.status == Ceremony.Status.REJECTED
