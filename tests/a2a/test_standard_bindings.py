"""The standard A2A 1.0 bindings, driven over real HTTP by the unmodified a2a-sdk client in its
own virtualenv (tests/a2a_sdk): card resolution, send, get, list, cancel, the approval as
auth-required, 401 without a key, 403 outside the grants, idempotent resubmission. Every
value the host sends is also checked here against the vendored A2A schema."""

import json
import subprocess
import uuid

import httpx
import pytest

from a2a.models import A2AMessage, PartnerKey
from a2a.schemas import validate, validate_wire
from agents.models import Agent, AgentRun
from agents.tasks import deliver
from held.models import Ceremony
from mcplet_host.authority import Authority
from mcplet_host.celery import app
from mcplet_host.models import AuditEvent
from tests.a2a.test_endpoint import info_script
from tests.a2a_sdk import sdk

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

BINDINGS = ["JSONRPC", "HTTP+JSON"]


@pytest.fixture
def partner(registry):
    partner = registry["partner"]
    partner.callable_agents.set([registry["info"], registry["dispatch"]])
    partner.accessible_pools.set([registry["info-pool"]])
    return partner


@pytest.fixture
def key(partner):
    return PartnerKey.issue(partner, "sdk")[1]


def user_message(parameters=None, text=None, message_id=None):
    parts = [{"data": parameters if parameters is not None else {"store": "shinjuku"}}]
    if text:
        parts.append({"text": text})
    return {"messageId": message_id or str(uuid.uuid4()), "role": "ROLE_USER", "parts": parts}


def one(results):
    assert len(results) == 1, results
    return results[0]


def test_the_vendored_schema_is_the_sdks_proto():
    dumped = subprocess.run(
        [sdk.python(), "-I", str(sdk.HERE / "dump_schema.py")], capture_output=True, check=True
    ).stdout
    vendored = sdk.ROOT / "a2a" / "json_schemas" / "a2a-v1.json"
    assert json.loads(dumped) == json.loads(vendored.read_text())


def test_the_public_card_names_the_bindings_and_no_agent(live_server, peer, partner):
    card = one(peer.call(op="card", url=live_server.url))
    sent = httpx.get(f"{live_server.url}/.well-known/agent-card.json").json()
    validate_wire("AgentCard", sent)  # (the SDK leaves out what is empty, e.g. "skills": [])
    assert card["name"] == sent["name"] == "MCPlet Host"
    assert {(i["protocolBinding"], i["url"]) for i in card["supportedInterfaces"]} == {
        ("JSONRPC", f"{live_server.url}/a2a/v1"),
        ("HTTP+JSON", f"{live_server.url}/a2a/v1"),
    }
    assert card["securitySchemes"]["partnerKey"]["httpAuthSecurityScheme"]["scheme"] == "bearer"
    assert card.get("skills", []) == [] and "info-gathering-agent" not in json.dumps(card)


@pytest.mark.parametrize("binding", BINDINGS)
def test_the_extended_card_lists_exactly_the_callable_agents(live_server, peer, key, binding):
    card = one(peer.call(op="extended", url=live_server.url, key=key, binding=binding))
    validate_wire("AgentCard", card)
    assert [s["id"] for s in card["skills"]] == ["dispatch-agent", "info-gathering-agent"]
    cards = card["capabilities"]["extensions"][0]["params"]["agents"]
    assert sorted(cards) == ["dispatch-agent", "info-gathering-agent"]
    for agent_card in cards.values():
        validate("agent-card", agent_card)


def test_an_agents_card_needs_the_key_and_the_grant(live_server, peer, key):
    url = f"{live_server.url}/a2a/v1/info-gathering-agent"
    card = one(peer.call(op="card", url=url, key=key))
    assert {i["url"] for i in card["supportedInterfaces"]} == {url}
    assert [s["id"] for s in card["skills"]] == ["info-gathering-agent"]
    refused = one(peer.call(op="card", url=url))
    assert refused["raised"] == "AgentCardResolutionError" and "401" in refused["message"]
    closed = one(peer.call(op="card", url=f"{live_server.url}/a2a/v1/planning-agent", key=key))
    assert "403" in closed["message"]


@pytest.mark.parametrize("binding", BINDINGS)
def test_send_runs_the_task_as_post_a2a_tasks_does(
    live_server, peer, key, registry, script, calls, binding
):
    registry["info"].model = info_script(script)
    registry["info"].save()
    url = f"{live_server.url}/a2a/v1/info-gathering-agent"
    event = one(
        peer.call(op="send", url=url, key=key, binding=binding, message=user_message(text="hi"))
    )
    task = event["task"]
    validate_wire("Task", task)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    data, text = task["artifacts"][0]["parts"]
    validate("task-response", data["data"])
    assert data["data"]["payload"]["result"] == {"analysis": "rain tomorrow"}
    assert text["text"] == "info-gathering-agent answered: success."
    assert [c["name"] for c in calls()] == ["query_crm", "fetch_web_content"]
    run = AgentRun.objects.get()
    assert run.authority == Authority.of_partner("partner-bot")
    assert run.request.body["payload"]["history"] == [{"role": "user", "content": "hi"}]
    assert str(run.request.context_id) == task["contextId"] == data["data"]["contextId"]

    got = one(peer.call(op="get", url=url, key=key, binding=binding, id=task["id"]))
    assert got == task
    listed = one(peer.call(op="list", url=url, key=key, binding=binding))
    assert [t["id"] for t in listed["tasks"]] == [task["id"]] and listed["totalSize"] == 1
    validate_wire("ListTasksResponse", {"nextPageToken": "", **listed})


@pytest.mark.parametrize("binding", BINDINGS)
def test_the_extended_card_gives_each_agent_its_interfaces(live_server, peer, key, binding):
    card = one(peer.call(op="extended", url=live_server.url, key=key, binding=binding))
    assert sorted(
        (i["tenant"], i["protocolBinding"], i["url"]) for i in card["supportedInterfaces"]
    ) == [
        (agent, each, f"{live_server.url}/a2a/v1")
        for agent in ("dispatch-agent", "info-gathering-agent")
        for each in sorted(BINDINGS)
    ]
    assert all(f"tenant:{s['id']}" in s["tags"] for s in card["skills"])


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_client_finds_a_chosen_agent_from_the_cards_alone(
    live_server, peer, key, registry, script, calls, binding
):
    """Only the host's origin and the skill's id: card, extended card, the skill's interface."""
    registry["dispatch"].model = script({"dispatch-agent": [{"json": {"sent": 0}}]})
    registry["dispatch"].save()
    event = one(
        peer.call(
            op="cards",
            url=live_server.url,
            key=key,
            binding=binding,
            skill="dispatch-agent",  # not the first agent the card lists
            message=user_message(),
        )
    )
    assert event["task"]["status"]["state"] == "TASK_STATE_COMPLETED", event
    assert AgentRun.objects.get().agent.agent_id == "dispatch-agent"
    assert calls() == []


@pytest.mark.parametrize("binding", BINDINGS)
def test_the_host_url_with_the_agent_as_tenant(live_server, peer, key, registry, script, binding):
    registry["info"].model = info_script(script, tools=("query_crm",))
    registry["info"].save()
    event = one(
        peer.call(
            op="send",
            url=f"{live_server.url}/a2a/v1",
            key=key,
            binding=binding,
            message=user_message(),
            tenant="info-gathering-agent",
        )
    )
    assert event["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert AgentRun.objects.get().agent.agent_id == "info-gathering-agent"


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_resubmitted_message_is_the_same_task(
    live_server, peer, key, registry, script, calls, binding
):
    registry["info"].model = info_script(script, tools=("query_crm",))
    registry["info"].save()
    url = f"{live_server.url}/a2a/v1/info-gathering-agent"
    message = user_message(message_id="partner-message-7")  # not a UUID: mapped to one
    first = one(peer.call(op="send", url=url, key=key, binding=binding, message=message))
    again = one(peer.call(op="send", url=url, key=key, binding=binding, message=message))
    assert first == again and AgentRun.objects.count() == 1 and len(calls()) == 1


@pytest.mark.parametrize("binding", BINDINGS)
def test_no_key_is_401_and_outside_the_grants_is_403(
    live_server, peer, key, partner, calls, binding
):
    url = f"{live_server.url}/a2a/v1/info-gathering-agent"
    resolved = f"{live_server.url}/a2a/v1"  # the public card resolves without a key
    no_key = one(
        peer.call(op="send", url=resolved, binding=binding, message=user_message(), tenant="x")
    )
    assert "401" in no_key["message"]
    closed = one(
        peer.call(
            op="send",
            url=resolved,
            key=key,
            binding=binding,
            message=user_message(),
            tenant="planning-agent",
        )
    )
    assert "403" in closed["message"]
    pools = one(
        peer.call(
            op="send",
            url=url,
            key=key,
            binding=binding,
            message=user_message({"pools": ["media-pool"]}),
        )
    )
    assert "403" in pools["message"]
    assert not A2AMessage.objects.exists() and calls() == []
    statuses = list(
        AuditEvent.objects.filter(event_type="a2a.partner.request")
        .order_by("seq")
        .values_list("details__status", flat=True)
    )
    assert 401 in statuses and statuses.count(403) == 2


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_held_call_is_auth_required_then_completed(
    live_server, peer, key, registry, partner, script, calls, admin_user, binding
):
    partner.accessible_pools.add(registry["media-pool"])
    registry["dispatch"].model = dispatch_script(script)
    registry["dispatch"].save()
    url = f"{live_server.url}/a2a/v1/dispatch-agent"
    task = one(peer.call(op="send", url=url, key=key, binding=binding, message=user_message()))[
        "task"
    ]
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert "approve send_email with a passkey" in task["status"]["message"]["parts"][0]["text"]
    assert calls() == []
    Ceremony.objects.get().approve(
        admin_user, assertion={"type": "passkey_assertion", "signature": "c2ln"}
    )
    done = one(peer.call(op="get", url=url, key=key, binding=binding, id=task["id"]))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(calls("send_email")) == 1


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_task_its_delivery_refuses_is_rejected(
    live_server, peer, key, registry, partner, script, calls, binding
):
    registry["info"].model = info_script(script, tools=("query_crm",))
    registry["info"].save()
    agent, url = f"{live_server.url}/a2a/v1/info-gathering-agent", f"{live_server.url}/a2a/v1"
    app.conf.task_always_eager = False  # accepted; the test delivers it, as a worker would
    task = one(peer.call(op="send", url=agent, key=key, binding=binding, message=user_message()))
    task = task["task"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    Agent.objects.filter(agent_id="info-gathering-agent").update(enabled=False)  # meanwhile
    request = A2AMessage.objects.get(type="task_request")
    deliver(str(request.message_id), request.signature)

    got = one(peer.call(op="get", url=url, key=key, binding=binding, id=task["id"]))
    assert got["status"]["state"] == "TASK_STATE_REJECTED"
    assert "is disabled" in got["status"]["message"]["parts"][0]["text"]
    listed = one(
        peer.call(op="list", url=url, key=key, binding=binding, status="TASK_STATE_REJECTED")
    )
    assert [t["id"] for t in listed["tasks"]] == [task["id"]]
    assert not AgentRun.objects.exists() and calls() == []


@pytest.mark.parametrize("binding", BINDINGS)
def test_cancel_and_a_second_cancel(
    live_server, peer, key, registry, partner, script, calls, binding
):
    partner.accessible_pools.add(registry["media-pool"])
    registry["dispatch"].model = dispatch_script(script)
    registry["dispatch"].save()
    url = f"{live_server.url}/a2a/v1/dispatch-agent"
    task = one(peer.call(op="send", url=url, key=key, binding=binding, message=user_message()))[
        "task"
    ]
    cancelled = one(peer.call(op="cancel", url=url, key=key, binding=binding, id=task["id"]))
    assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
    assert Ceremony.objects.get().status == Ceremony.Status.REJECTED and calls() == []
    again = one(peer.call(op="cancel", url=url, key=key, binding=binding, id=task["id"]))
    assert again["raised"] == "TaskNotCancelableError"
    missing = one(peer.call(op="get", url=url, key=key, binding=binding, id=str(uuid.uuid4())))
    assert missing["raised"] == "TaskNotFoundError"
    listed = one(
        peer.call(op="list", url=url, key=key, binding=binding, status="TASK_STATE_CANCELED")
    )
    assert [t["id"] for t in listed["tasks"]] == [task["id"]]
    none = one(
        peer.call(op="list", url=url, key=key, binding=binding, status="TASK_STATE_COMPLETED")
    )
    assert none.get("tasks", []) == []


def dispatch_script(script):
    return script(
        {
            "dispatch-agent": [
                {
                    "json": {
                        "actions": [
                            {
                                "tool": "send_email",
                                "arguments": {"to": ["sato@example.jp"], "body": "Hi"},
                            }
                        ]
                    }
                },
            ]
        }
    )
