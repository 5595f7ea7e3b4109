"""Hostile bodies and paths at the partner API (issue 14, reproduction 5): numbers JSON cannot
carry, lone surrogates, NUL characters (PostgreSQL refuses them), nesting deep enough to break a
recursive parser. Each is a 400 in the A2A error shape with an audit event, never a 500, and no
message is stored."""

import json

import pytest

from a2a import messages
from a2a.models import A2AMessage, PartnerKey
from agents.models import Agent
from mcplet_host.models import AuditEvent

pytestmark = pytest.mark.django_db

PARAMETERS = '{"store": "shinjuku"}'
HOSTILE_VALUES = {
    "a number beyond float": "1e400",
    "a negative one": "-1e400",
    "a lone high surrogate": '"\\ud800"',
    "a lone low surrogate": '"caf\\udc00e"',
    "a NUL character": '"a\\u0000b"',
    "nesting 3,000 deep": "[" * 3000 + "]" * 3000,
    "nesting 200 deep": '{"a":' * 200 + "1" + "}" * 200,
}


@pytest.fixture
def partner():
    partner = Agent.objects.create(agent_id="partner-bot", display_name="P", kind="external")
    partner.callable_agents.set([Agent.objects.create(agent_id="info-gathering-agent")])
    return partner


@pytest.fixture
def post(client, partner):
    _, raw = PartnerKey.issue(partner, "tests")
    client.raise_request_exception = False

    def send(path, body, method="POST"):
        return client.generic(
            method, path, body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw}"
        )

    return send


def task_text():
    return json.dumps(messages.task_request("partner-bot", "info-gathering-agent", {"store": 1}))


def variants(value):
    """The hostile JSON `value` in each place of a task request a partner controls."""
    task = task_text()
    places = {
        "in parameters": task.replace('{"store": 1}', f'{{"store": {value}}}'),
        "in history": task.replace(
            '"payload": {', f'"payload": {{"history": [{{"role": "user", "content": {value}}}], '
        ),
    }
    if value.startswith('"'):  # a string: a key too
        places["as a parameter's key"] = task.replace('{"store": 1}', f"{{{value}: 1}}")
    return places


def assert_refused_and_audited(response, status=400, code="VALIDATION_ERROR"):
    assert response.status_code == status, response.content[:300]
    assert response.json()["error"]["code"] == code
    event = AuditEvent.objects.filter(event_type="a2a.partner.request").order_by("-seq").first()
    assert (event.result, event.details["status"]) == ("BLOCKED", status)
    assert not A2AMessage.objects.exists()


@pytest.mark.parametrize("what", HOSTILE_VALUES)
def test_a_hostile_task_request_is_400(post, what):
    for where, body in variants(HOSTILE_VALUES[what]).items():
        response = post("/a2a/tasks", body)
        assert_refused_and_audited(response)
        message = response.json()["error"]["message"]
        assert message.startswith("The body cannot be accepted: "), where
        if where == "in parameters" and "nesting" not in what:
            assert "payload.parameters.store: it" in message


@pytest.mark.parametrize("field", ["recipientId", "senderId", "messageId", "locale"])
def test_a_nul_in_an_envelope_field_is_400(post, field):
    task = json.loads(task_text())
    task[field] = f"{task.get(field, 'ja')}\u0000"
    assert_refused_and_audited(post("/a2a/tasks", json.dumps(task)))


@pytest.mark.parametrize("what", HOSTILE_VALUES)
def test_a_hostile_agent_card_is_400(post, what):
    card = json.dumps(messages.agent_card("partner-bot", description="§"), ensure_ascii=False)
    body = card.replace('"§"', HOSTILE_VALUES[what])
    assert_refused_and_audited(post("/a2a/agents/me", body, method="PUT"))
    assert Agent.objects.get(agent_id="partner-bot").advertised_card in (None, {})


@pytest.mark.parametrize(
    "path", ["/a2a/tasks/%00", "/a2a/tasks/%00/cancel", "/a2a/agents/%00", "/a2a/%00"]
)
def test_a_nul_in_the_path_is_a_4xx_and_audited(post, path):
    response = post(path, "{}", method="GET")
    assert 400 <= response.status_code < 500
    event = AuditEvent.objects.order_by("-seq").first()
    assert event.result == "BLOCKED" and "\x00" not in json.dumps(event.details)
