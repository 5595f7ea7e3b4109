"""`parameters.pools` of a partner's task must lie inside partner ∩ recipient grants (§16.4):
each pool held by both, not merely by one of them (issue 14, reproduction 6)."""

import pytest

from a2a import messages
from a2a.models import A2AMessage, PartnerKey
from agents.models import Agent
from pools.models import Pool

pytestmark = pytest.mark.django_db


@pytest.fixture
def send(client, settings):
    settings.MCPLET_A2A_WAIT = 0  # the bus delivers after the commit: answer 202 at once
    pools = {name: Pool.objects.create(name=name) for name in ("info-pool", "media-pool", "pay")}
    partner = Agent.objects.create(agent_id="partner-bot", kind="external")
    info = Agent.objects.create(agent_id="info-gathering-agent")
    partner.callable_agents.set([info])
    partner.accessible_pools.set([pools["info-pool"], pools["media-pool"]])
    info.accessible_pools.set([pools["info-pool"], pools["pay"]])
    _, raw = PartnerKey.issue(partner, "tests")

    def post(requested):
        body = messages.task_request("partner-bot", info.agent_id, {"pools": requested})
        return client.post(
            "/a2a/tasks", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw}"
        )

    return post


def test_pools_both_hold_are_accepted(send):
    response = send(["info-pool"])
    assert response.status_code == 202, response.content
    assert A2AMessage.objects.count() == 1


@pytest.mark.parametrize(
    ("requested", "outside"),
    [
        (["media-pool"], "media-pool"),  # the partner's, not the recipient's
        (["pay"], "pay"),  # the recipient's, not the partner's
        (["info-pool", "media-pool", "pay"], "media-pool, pay"),
        (["unknown-pool"], "unknown-pool"),
    ],
)
def test_pools_outside_either_grant_are_403(send, requested, outside):
    response = send(requested)
    assert response.status_code == 403
    assert response.json()["error"]["message"] == f"These pools are outside your grants: {outside}."
    assert not A2AMessage.objects.exists()


STORE_SCHEMA = {
    "type": "object",
    "properties": {"store": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["store"],
}


@pytest.mark.parametrize(
    ("parameters", "path", "says"),
    [
        ({"days": 2}, "payload.parameters", "'store' is a required property"),
        ({"store": 7}, "payload.parameters.store", "7 is not of type 'string'"),
        ({"store": "x", "days": 0}, "payload.parameters.days", "0 is less than the minimum of 1"),
    ],
)
def test_parameters_must_match_the_recipients_input_schema(client, parameters, path, says):
    """§18.4: checked before any run starts, a 400 naming the path (issue 14)."""
    partner = Agent.objects.create(agent_id="partner-bot", kind="external")
    info = Agent.objects.create(agent_id="info-gathering-agent", input_schema=STORE_SCHEMA)
    partner.callable_agents.set([info])
    _, raw = PartnerKey.issue(partner, "tests")
    body = messages.task_request("partner-bot", info.agent_id, parameters)
    response = client.post(
        "/a2a/tasks", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw}"
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["path"]) == ("VALIDATION_ERROR", path)
    assert says in error["message"] and "inputSchema of info-gathering-agent" in error["message"]
    assert not A2AMessage.objects.exists()
