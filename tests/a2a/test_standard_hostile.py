"""Hostile requests to the standard A2A bindings: each is a clear refusal in the binding's own
error shape (HTTP 401/403/413 first, then JSON-RPC's or HTTP+JSON's error) and an audit event,
never a 500, and nothing runs."""

import json

import httpx
import pytest

from a2a.models import A2AMessage, PartnerKey
from mcplet_host.models import AuditEvent

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def api(live_server, registry):
    partner = registry["partner"]
    partner.callable_agents.set([registry["info"]])
    _, raw = PartnerKey.issue(partner, "hostile")
    with httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Bearer {raw}"}, timeout=30
    ) as client:
        yield client


def rpc(method, params, **extra):
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params, **extra}


MESSAGE = {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"store": "x"}}]}


def send(**changes):
    return json.dumps(rpc("SendMessage", {"message": {**MESSAGE, **changes}})).encode()


DEEP = {"a": None}
for _ in range(200):
    DEEP = {"a": DEEP}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b'{"jsonrpc": ', -32700),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "\\u0000"}}', -32700),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": 1e400}}', -32700),
        (json.dumps(DEEP).encode(), -32700),
        (json.dumps([rpc("GetTask", {"id": "x"})]).encode(), -32600),
        (json.dumps({"jsonrpc": "2.0", "id": {"x": 1}, "method": "GetTask"}).encode(), -32600),
        (json.dumps({"jsonrpc": "2.0", "id": True, "method": "GetTask"}).encode(), -32600),
        (json.dumps({"jsonrpc": "2.0", "id": 1.5, "method": "GetTask"}).encode(), -32602),
        (json.dumps(rpc("GetTask", "x")).encode(), -32600),
        (json.dumps(rpc("tasks/get", {"id": "x"})).encode(), -32601),
        (json.dumps(rpc("GetTask", {"id": 5})).encode(), -32602),
        (json.dumps(rpc("GetTask", {"id": "../../etc"})).encode(), -32001),
        (json.dumps(rpc("ListTasks", {"pageSize": -5})).encode(), -32602),
        (json.dumps(rpc("ListTasks", {"historyLength": -1})).encode(), -32602),
        (json.dumps(rpc("GetTask", {"id": "x", "historyLength": -1})).encode(), -32602),
        (json.dumps(rpc("ListTasks", {"pageToken": "9" * 40})).encode(), -32602),
        (
            json.dumps(rpc("SendMessage", {"message": {**MESSAGE, "role": "ROLE_AGENT"}})).encode(),
            -32602,
        ),
        (
            json.dumps(rpc("SendMessage", {"message": {**MESSAGE, "powers": "all"}})).encode(),
            -32602,
        ),
        (
            json.dumps(
                rpc(
                    "SendMessage",
                    {"message": {**MESSAGE, "parts": [{"url": "file:///etc/passwd"}]}},
                )
            ).encode(),
            -32602,
        ),
        (
            json.dumps(
                rpc("SendMessage", {"message": {**MESSAGE, "parts": [{"data": [1]}]}})
            ).encode(),
            -32602,
        ),
        (
            json.dumps(
                rpc("SendMessage", {"message": MESSAGE, "tenant": "planning-agent"})
            ).encode(),
            -32602,
        ),
    ],
)
def test_a_hostile_json_rpc_request_is_a_json_rpc_error(api, calls, body, code):
    response = api.post(
        "/a2a/v1/info-gathering-agent", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["error"]["code"] == code
    assert not A2AMessage.objects.exists() and calls() == []
    event = AuditEvent.objects.filter(event_type="a2a.partner.request").latest("seq")
    assert event.result == "BLOCKED" and event.details["code"] == code


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/a2a/v1/info-gathering-agent/tasks?pageSize=abc", 400),
        ("GET", "/a2a/v1/info-gathering-agent/tasks?status=TASK_STATE_NONSENSE", 400),
        ("GET", "/a2a/v1/info-gathering-agent/tasks/not-a-task", 404),
        ("POST", "/a2a/v1/info-gathering-agent/tasks/x:cancel", 404),
        ("GET", "/a2a/v1/planning-agent/tasks", 200),  # (none of yours: an empty list)
        ("POST", "/a2a/v1/planning-agent/message:send", 403),
        ("GET", "/a2a/v1/planning-agent/extendedAgentCard", 403),
        # A method the URL does not take: 405, whatever the body (none here).
        ("GET", "/a2a/v1/info-gathering-agent/tasks/x:cancel", 405),
        ("GET", "/a2a/v1/info-gathering-agent/message:send", 405),
        ("POST", "/a2a/v1/info-gathering-agent/tasks", 405),
        ("POST", "/a2a/v1/info-gathering-agent/extendedAgentCard", 405),
        ("DELETE", "/a2a/v1/info-gathering-agent/tasks/x", 405),
        ("DELETE", "/a2a/v1/info-gathering-agent/tasks/x/pushNotificationConfigs", 405),
        ("POST", "/a2a/v1/info-gathering-agent/tasks/x/pushNotificationConfigs/h1", 405),
    ],
)
def test_a_hostile_rest_request_is_a_clear_4xx(api, calls, method, path, status):
    response = api.request(method, path, json={"message": MESSAGE})
    assert response.status_code == status, response.text
    if status == 400:
        info = response.json()["error"]["details"][0]
        assert info["reason"] == "INVALID_PARAMS" and info["domain"] == "a2a-protocol.org"
    if status == 405:
        assert response.json()["error"]["details"][0]["reason"] == "METHOD_NOT_ALLOWED"
        assert method not in response.headers["Allow"]
    assert calls() == []


def test_without_a_key_every_binding_is_401_before_reading(live_server, registry):
    for path in ("/a2a/v1", "/a2a/v1/info-gathering-agent", "/a2a/v1/x/message:send"):
        response = httpx.post(f"{live_server.url}{path}", content=b"not json at all")
        assert response.status_code == 401 and "WWW-Authenticate" in response.headers
    card = f"{live_server.url}/.well-known/agent-card.json"
    assert httpx.get(card).status_code == 200 and httpx.head(card).status_code == 200
    refused = httpx.post(card, content=b"{}")  # 405, not the CSRF page
    assert refused.status_code == 405 and refused.headers["Allow"] == "GET, HEAD"


def test_history_length_is_how_many_messages_come_back(api, calls):
    """historyLength: none, a limit (0: no message), as the SDK's own server applies it."""
    sent = api.post(
        "/a2a/v1/info-gathering-agent",
        content=send(messageId="h1"),
        headers={"Content-Type": "application/json"},
    )
    task = sent.json()["result"]["task"]
    assert len(task["history"]) == 1
    for length, messages in ((None, 1), (0, 0), (1, 1), (5, 1)):
        params = {"id": task["id"]} | ({} if length is None else {"historyLength": length})
        got = api.post("/a2a/v1/info-gathering-agent", json=rpc("GetTask", params)).json()
        assert len(got["result"]["history"]) == messages, (length, got)
        listing = {k: v for k, v in params.items() if k != "id"}
        listed = api.post("/a2a/v1/info-gathering-agent", json=rpc("ListTasks", listing)).json()
        assert all(len(t["history"]) == messages for t in listed["result"]["tasks"])


@pytest.mark.parametrize("version", ["2.0", "0.3", "1.1", "garbage"])
def test_another_a2a_version_is_told_so(api, calls, version):
    """A client of another A2A version is refused as the SDK's server refuses it, not served
    1.0 semantics unawares; 1.0 (or no header at all) is served."""
    headers = {"A2A-Version": version}
    answer = api.post(
        "/a2a/v1/info-gathering-agent", json=rpc("ListTasks", {}), headers=headers
    ).json()
    assert answer["error"]["code"] == -32009, answer
    rest = api.get("/a2a/v1/info-gathering-agent/tasks", headers=headers)
    assert rest.status_code == 400
    assert rest.json()["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    for served in ({"A2A-Version": "1.0"}, {}):
        listed = api.post("/a2a/v1/info-gathering-agent", json=rpc("ListTasks", {}), headers=served)
        assert "result" in listed.json()
    assert calls() == []
