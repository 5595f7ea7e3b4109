"""The partner A2A endpoint over real HTTP (Django's live server): each error a partner can
get, and tasks that run, wait for an approval, are resubmitted and cancelled."""

import json
import uuid
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from a2a import messages
from a2a.api import PartnerRateThrottle
from a2a.models import A2AMessage, PartnerKey
from a2a.schemas import validate
from agents.models import AgentRun
from held.models import Ceremony
from mcplet_host.authority import Authority
from mcplet_host.models import AuditEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]


@pytest.fixture
def partner(registry):
    partner = registry["partner"]
    partner.callable_agents.set([registry["info"], registry["dispatch"]])
    partner.accessible_pools.set([registry["info-pool"]])
    return partner


def task(recipient="info-gathering-agent", parameters=None, sender="partner-bot"):
    return messages.task_request(sender, recipient, parameters or {"store": "shinjuku"})


def error_of(response):
    return response.json()["error"]


def last_partner_event():
    return AuditEvent.objects.filter(event_type="a2a.partner.request").order_by("-seq").first()


# --- 401 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "code", "says"),
    [
        (None, "AUTH_REQUIRED", "Send your partner key as 'Authorization: Bearer <key>'."),
        ("Bearer mcpk_notAKeyAtAll", "AUTH_FAILED", "This partner key is not known."),
        ("Basic dXNlcjpwdw==", "AUTH_REQUIRED", "Send your partner key"),
    ],
)
def test_no_or_unknown_key_is_401(live_server, partner, calls, header, code, says):
    headers = {"Authorization": header} if header else {}
    response = httpx.post(f"{live_server.url}/a2a/tasks", json=task(), headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="mcplet-a2a"'
    assert (
        error_of(response) == {"code": code, "message": says}
        or says in error_of(response)["message"]
    )
    assert not A2AMessage.objects.exists() and calls() == []
    assert last_partner_event().details["status"] == 401


@pytest.mark.parametrize("state", ["revoked", "expired"])
def test_revoked_and_expired_keys_are_401(api, state, calls):
    if state == "revoked":
        api.key.revoke()
    else:
        PartnerKey.objects.filter(pk=api.key.pk).update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )
    response = api.post("/a2a/tasks", json=task())
    assert (
        response.status_code == 401
        and error_of(response)["message"]
        == f"This partner key {'was revoked' if state == 'revoked' else 'has expired'}."
    )
    assert not A2AMessage.objects.exists() and calls() == []


# --- 400, 413, 429 ------------------------------------------------------------------------------


def test_malformed_json_is_400(api):
    response = api.post(
        "/a2a/tasks", content=b'{"messageId": ', headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400 and error_of(response)["message"].startswith(
        "The body is not valid JSON"
    )


@pytest.mark.parametrize(
    ("change", "path", "says"),
    [
        ({"messageId": "not-a-uuid"}, "messageId", "is not a 'uuid'"),
        ({"type": "task_response"}, "type", "'task_request' was expected"),
        (
            {"payload": {"history": [{"role": "robot", "content": "x"}]}},
            "payload.history[0].role",
            "is not one of",
        ),
    ],
)
def test_a_schema_violation_is_400_with_the_path(api, change, path, says):
    response = api.post("/a2a/tasks", json={**task(), **change})
    assert response.status_code == 400
    error = error_of(response)
    assert (
        error["code"] == "VALIDATION_ERROR" and error["path"] == path and says in error["message"]
    )
    assert not A2AMessage.objects.exists()


def test_a_body_over_1_mb_is_413(api):
    body = task(parameters={"blob": "x" * (1024 * 1024)})
    response = api.post("/a2a/tasks", json=body)
    assert response.status_code == 413 and error_of(response)["code"] == "X_PAYLOAD_TOO_LARGE"
    assert not A2AMessage.objects.exists()


def test_the_per_partner_rate_limit_is_429_with_retry_after(api, monkeypatch):
    monkeypatch.setattr(PartnerRateThrottle, "rate", "2/min", raising=False)
    codes = [api.get("/a2a/agents").status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    response = api.get("/a2a/agents")
    assert int(response.headers["Retry-After"]) > 0
    error = error_of(response)
    assert (
        error["code"] == "RATE_LIMITED"
        and error["retryable"] is True
        and error["retry_after_ms"] > 0
    )


# --- tasks -----------------------------------------------------------------------------------


def info_script(script, tools=("query_crm", "fetch_web_content")):
    calls = [
        {"name": "query_crm", "arguments": {"filter": "rain"}},
        {"name": "fetch_web_content", "arguments": {"url": "https://weather.example/tomorrow"}},
    ]
    return script(
        {
            "info-gathering-agent": [
                {"tool_calls": [c for c in calls if c["name"] in tools]},
                {"json": {"analysis": "rain tomorrow"}},
            ]
        }
    )


def test_a_valid_task_runs_and_answers(api, registry, script, calls):
    registry["info"].model = info_script(script)
    registry["info"].save()
    body = task()
    response = api.post("/a2a/tasks", json=body)
    assert response.status_code == 200
    answer = response.json()
    validate("task-response", answer)
    assert answer["status"] == "success" and answer["replyToMessageId"] == body["messageId"]
    assert answer["recipientId"] == "partner-bot" and answer["contextId"] == body["contextId"]
    assert answer["payload"]["result"] == {"analysis": "rain tomorrow"}
    assert [c["name"] for c in calls()] == ["query_crm", "fetch_web_content"]
    assert AgentRun.objects.get().authority == Authority.of_partner("partner-bot")


def test_a_task_runs_with_the_pools_both_hold(api, registry, partner, script, calls):
    partner.accessible_pools.clear()  # the info agent holds info-pool; the partner does not
    registry["info"].model = script(
        {
            "info-gathering-agent": [
                {
                    "tool_calls": [
                        {
                            "name": "fetch_web_content",
                            "arguments": {"url": "https://weather.example"},
                        }
                    ]
                },
                {
                    "expect": {"tool_results_contain": ["X_ACCESS_DENIED"]},
                    "json": {"analysis": "no weather"},
                },
            ]
        }
    )
    registry["info"].save()
    response = api.post("/a2a/tasks", json=task())
    assert response.json()["status"] == "success" and calls() == []
    blocked = AuditEvent.objects.get(event_type="TOOL_BLOCKED")
    assert (
        blocked.details["partner"] == "partner-bot" and blocked.target_tool == "fetch_web_content"
    )


def test_a_refusal_the_script_did_not_plan_for_reaches_the_partner_as_itself(
    api, registry, partner, script, calls
):
    """The reference script expects weather, not a refusal: the run ends with the refusal's own
    code and words (§ as §), not with the scripted model's failure to follow its script."""
    partner.accessible_pools.clear()  # the info agent holds info-pool; the partner does not
    fetch = {"name": "fetch_web_content", "arguments": {"url": "https://weather.example"}}
    registry["info"].model = script(
        {
            "info-gathering-agent": [
                {"tool_calls": [fetch]},
                {
                    "expect": {"tool_errors": False, "tool_results_contain": ["rain"]},
                    "json": {"analysis": "rain tomorrow"},
                },
            ]
        }
    )
    registry["info"].save()
    answer = api.post("/a2a/tasks", json=task()).json()
    assert answer["status"] == "error" and calls() == []
    error = answer["payload"]["error"]
    assert error["code"] == "X_ACCESS_DENIED", error
    assert "not granted to partner-bot (§3.4, §16.1)" in error["message"]
    assert "\\u00a7" not in json.dumps(answer, ensure_ascii=False)
    run = AgentRun.objects.get()
    assert run.error == error
    refusal = next(m["content"] for m in run.transcript if m["role"] == "tool")
    assert "(§3.4, §16.1)" in refusal  # what the model reads, as written


def dispatch_task(api, registry, partner, script):
    partner.accessible_pools.add(registry["media-pool"])
    registry["dispatch"].model = script(
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
    registry["dispatch"].save()
    body = task(recipient="dispatch-agent")
    return body, api.post("/a2a/tasks", json=body)


def test_a_task_waiting_for_approval_is_polled_to_completion(
    api, registry, partner, script, calls, admin_user
):
    body, response = dispatch_task(api, registry, partner, script)
    assert response.status_code == 202
    assert response.headers["Location"] == f"/a2a/tasks/{body['messageId']}"
    assert (
        response.json()["state"] == "awaiting_approval"
        and response.json()["awaiting"]["tool"] == "send_email"
    )
    assert api.get(response.headers["Location"]).status_code == 202

    Ceremony.objects.get().approve(
        admin_user, assertion={"type": "passkey_assertion", "signature": "c2ln"}
    )

    final = api.get(response.headers["Location"])
    assert final.status_code == 200 and final.json()["status"] == "success"
    assert final.json()["payload"]["result"]["dispatched"] == {"succeeded": 1, "failed": 0}
    assert len(calls("send_email")) == 1


def test_a_resubmitted_message_is_the_same_task(api, registry, script, calls):
    registry["info"].model = info_script(script, tools=("query_crm",))
    registry["info"].save()
    body = task()
    first = api.post("/a2a/tasks", json=body)
    again = api.post("/a2a/tasks", json=body)
    assert first.json() == again.json() and again.status_code == 200
    assert AgentRun.objects.count() == 1 and len(calls()) == 1


def test_cancel(api, registry, partner, script, calls):
    body, response = dispatch_task(api, registry, partner, script)
    cancelled = api.post(f"/a2a/tasks/{body['messageId']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert Ceremony.objects.get().status == Ceremony.Status.REJECTED and calls() == []
    assert api.post(f"/a2a/tasks/{body['messageId']}/cancel").status_code == 409


def test_another_partners_task_is_not_found(api, registry, script, live_server):
    registry["info"].model = info_script(script, tools=("query_crm",))
    registry["info"].save()
    body = task()
    api.post("/a2a/tasks", json=body)
    other = registry["partner"].__class__.objects.create(
        agent_id="other-bot", display_name="Other", kind="external"
    )
    _, raw = PartnerKey.issue(other, "x")
    response = httpx.get(
        f"{live_server.url}/a2a/tasks/{body['messageId']}",
        headers={"Authorization": f"Bearer {raw}"},
    )
    assert response.status_code == 404 and error_of(response)["code"] == "NOT_FOUND"
    assert api.get(f"/a2a/tasks/{uuid.uuid4()}").status_code == 404


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/a2a/task"), ("POST", "/a2a/tasks/not-a-uuid"), ("GET", "/a2a/")]
)
def test_an_unknown_endpoint_is_a_json_404_and_audited(api, live_server, method, path):
    response = api.request(method, path)
    assert response.status_code == 404 and response.headers["content-type"] == "application/json"
    error = error_of(response)
    assert error["code"] == "NOT_FOUND" and f"{method} {path}" in error["message"]
    event = last_partner_event()
    assert event.actor_id == "partner-bot" and event.details["status"] == 404
    anonymous = httpx.request(method, f"{live_server.url}{path}")  # nothing is told to a stranger
    assert anonymous.status_code == 401 and error_of(anonymous)["code"] == "AUTH_REQUIRED"


# --- cards -----------------------------------------------------------------------------------


def test_agent_cards_are_those_the_partner_may_call(api):
    cards = api.get("/a2a/agents").json()["agents"]
    assert [c["agentId"] for c in cards] == ["dispatch-agent", "info-gathering-agent"]
    for card in cards:
        validate("agent-card", card)
    assert api.get("/a2a/agents/info-gathering-agent").json()["agentId"] == "info-gathering-agent"
    assert api.get("/a2a/agents/planning-agent").status_code == 404


def test_advertising_a_card_requests_but_never_grants(api, partner, admin_client):
    card = messages.agent_card(
        "partner-bot", "Partner", requested_pools=["media-pool", "info-pool"]
    )
    response = api.put("/a2a/agents/me", json=card)
    assert response.status_code == 200 and response.json()["grantedPools"] == ["info-pool"]
    partner.refresh_from_db()
    assert partner.requested_pools == ["media-pool", "info-pool"]
    assert list(partner.accessible_pools.values_list("name", flat=True)) == ["info-pool"]
    page = admin_client.get(f"/admin/agents/agent/{partner.pk}/change/").content.decode()
    assert "media-pool, info-pool (from its card: a request, never a grant" in page
    assert api.put("/a2a/agents/me", json={**card, "agentId": "someone-else"}).status_code == 403
    assert api.put("/a2a/agents/me", json={**card, "powers": "all"}).status_code == 400


def test_the_openapi_schema_and_docs_are_served(live_server):
    schema = httpx.get(f"{live_server.url}/api/schema/", headers={"Accept": "application/json"})
    assert schema.status_code == 200
    paths = (
        json.loads(schema.text)["paths"]
        if schema.headers["content-type"].startswith("application/json")
        else schema.text
    )
    assert "/a2a/tasks" in paths
    assert httpx.get(f"{live_server.url}/api/docs/").status_code == 200
