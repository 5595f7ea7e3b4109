"""Malformed and oversized bodies at the partner API: not JSON, not an object, the wrong content
type, too large, JSON the host cannot store or sign (infinite numbers, lone surrogates, NUL,
deep nesting), and every field of a task request in a wrong shape. Each is a 4xx — never a 5xx
— with an audit event, and nothing runs (a task that got through would make the information
agent call query_crm)."""

import json

import pytest

from a2a import messages
from a2a.api import MAX_BODY
from a2a.models import A2AMessage

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

NOT_A_TASK = {
    "an empty body": b"",
    "a truncated object": b'{"messageId": ',
    "single quotes": b"{'type': 'task_request'}",
    "a trailing comma": b'{"type": "task_request",}',
    "an array": b"[]",
    "a string": b'"task"',
    "a number": b"42",
    "null": b"null",
    "NaN": b"NaN",
    "Infinity": b'{"x": Infinity}',
    "a byte-order mark": b'\xef\xbb\xbf{"type": "task_request"}',
    "invalid UTF-8": b'{"type": "\xff\xfe"}',
    "UTF-16": '{"type": "task_request"}'.encode("utf-16"),
    "trailing garbage": b'{"type": "task_request"} <script>',
}
HOSTILE_VALUES = {
    "1e400": "1e400",
    "-1e400": "-1e400",
    "a lone surrogate": '"\\ud800"',
    "a NUL": '"\\u0000"',
    "3,000 levels": "[" * 3000 + "]" * 3000,
    "100 levels": '{"a":' * 100 + "0" + "}" * 100,
}


def task(**changes):
    body = messages.task_request("partner-bot", "info-gathering-agent", {"store": "shinjuku"})
    for key, value in changes.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return body


WRONG_FIELDS = {
    "no messageId": task(messageId=None),
    "a messageId that is no UUID": task(messageId="msg-1"),
    "a numeric messageId": task(messageId=7),
    "no senderId": task(senderId=None),
    "a senderId list": task(senderId=["partner-bot"]),
    "no recipientId": task(recipientId=None),
    "a recipientId object": task(recipientId={"agentId": "info-gathering-agent"}),
    "a task_response type": task(type="task_response"),
    "no payload": task(payload=None),
    "parameters as a list": task(payload={"parameters": ["store"]}),
    "parameters as a string": task(payload={"parameters": "store=shinjuku"}),
    "history with a bad role": task(
        payload={"parameters": {}, "history": [{"role": "root", "content": "x"}]}
    ),
    "history as an object": task(payload={"parameters": {}, "history": {"role": "user"}}),
    "a timestamp that is no date": task(timestamp="yesterday"),
    "a contextId that is no UUID": task(contextId="../../etc"),
    "pools as a string": task(payload={"parameters": {"pools": "media-pool"}}),
}


def refused(attempts, partner, label, body, status, content_type="application/json"):
    with attempts.refused(label, event_type="a2a.partner.request", result="BLOCKED"):
        response = partner.post("/a2a/tasks", body, content_type=content_type)
        assert response.status_code == status, (label, response.status_code, response.content)
        assert response.json()["error"]["code"]


def test_the_harness_sees_a_task_run(partner, info_calls_crm, mcp):
    before = len(mcp.calls())
    assert partner.post("/a2a/tasks", json.dumps(task())).status_code == 200
    assert [c["name"] for c in mcp.calls()[before:]] == ["query_crm"]


def test_bodies_that_are_not_a_task(partner, info_calls_crm, attempts):
    for label, body in NOT_A_TASK.items():
        refused(attempts, partner, label, body, 400)
    valid = json.dumps(task())
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "application/xml"):
        refused(attempts, partner, content_type, valid, 415, content_type=content_type)
    oversized = json.dumps(task(payload={"parameters": {"pad": "x" * MAX_BODY}}))
    refused(attempts, partner, "a body over 1 MiB", oversized, 413)
    # Over Django's own 2.5 MiB: the same JSON refusal, not Django's HTML page.
    huge = json.dumps(task(payload={"parameters": {"pad": "x" * 3 * MAX_BODY}}))
    for path in (
        "/a2a/tasks",
        "/a2a/v1/info-gathering-agent",
        "/a2a/v1/info-gathering-agent/message:send",
    ):
        with attempts.refused(f"3 MiB to {path}", event_type="a2a.partner.request"):
            response = partner.post(path, huge)
            assert response.status_code == 413 and response["Content-Type"] == "application/json"
            assert "larger than 1024 KiB" in response.content.decode()
    assert not A2AMessage.objects.exists()


def test_a_chunked_body_is_asked_for_its_length(partner, info_calls_crm, attempts):
    """Django reads a body without a Content-Length as empty: the task the partner sent would
    be refused for fields it did send. It is asked for its length instead (411)."""
    with attempts.refused("a chunked task", event_type="a2a.partner.request", result="BLOCKED"):
        response = partner.client.generic(
            "POST",
            "/a2a/tasks",
            b"",
            content_type="application/json",
            HTTP_TRANSFER_ENCODING="chunked",
            **partner.headers(),
        )
        assert response.status_code == 411
        assert "Content-Length" in response.json()["error"]["message"]


def test_a2a_json_is_json(partner, info_calls_crm, mcp):
    """application/a2a+json, the A2A binding's media type, as a body and as what is accepted."""
    before = len(mcp.calls())
    response = partner.client.generic(
        "POST",
        "/a2a/tasks",
        json.dumps(task()),
        content_type="application/a2a+json",
        HTTP_ACCEPT="application/a2a+json",
        **partner.headers(),
    )
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/a2a+json"
    assert [c["name"] for c in mcp.calls()[before:]] == ["query_crm"]
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    listed = partner.post("/a2a/v1/info-gathering-agent", json.dumps(rpc), "application/a2a+json")
    assert listed.status_code == 200 and "tasks" in listed.json()["result"]
    page = partner.client.get("/a2a/tasks/" + task()["messageId"], HTTP_ACCEPT="text/html")
    assert page["Content-Type"] == "application/json"  # errors are JSON, never a browsable page


def test_json_the_host_cannot_store_or_sign(partner, info_calls_crm, attempts):
    text = json.dumps(task())
    for label, value in HOSTILE_VALUES.items():
        places = {
            "a parameter": text.replace('"shinjuku"', value),
            "history": text.replace(
                '"payload": {',
                f'"payload": {{"history": [{{"role": "user", "content": {value}}}], ',
            ),
        }
        if value.startswith('"'):
            places["a parameter's key"] = text.replace('"store"', value)
            places["recipientId"] = text.replace('"info-gathering-agent"', value)
        for place, body in places.items():
            refused(attempts, partner, f"{label} in {place}", body, 400)
    assert not A2AMessage.objects.exists()


def test_fields_in_the_wrong_shape(partner, info_calls_crm, attempts):
    for label, body in WRONG_FIELDS.items():
        with attempts.refused(label, event_type="a2a.partner.request", result="BLOCKED"):
            response = partner.post("/a2a/tasks", json.dumps(body))
            assert response.status_code in (400, 403), (label, response.content)
    assert not A2AMessage.objects.exists()


def test_hostile_agent_cards(partner, world, attempts):
    card = json.dumps(messages.agent_card("partner-bot", description="§"), ensure_ascii=False)
    for label, value in HOSTILE_VALUES.items():
        with attempts.refused(f"card with {label}", event_type="a2a.partner.request"):
            response = partner.put("/a2a/agents/me", card.replace('"§"', value))
            assert response.status_code == 400
    for label, body in NOT_A_TASK.items():
        with attempts.refused(f"card: {label}", event_type="a2a.partner.request"):
            assert partner.put("/a2a/agents/me", body).status_code == 400
    world.partner.refresh_from_db()
    assert not world.partner.advertised_card


def test_a2a_json_bodies_are_as_hostile_as_json(partner, info_calls_crm, attempts):
    """The A2A media type goes through the same reading: what the host cannot store or sign
    is refused, and so is a Content-Length that is no number."""
    text = json.dumps(task())
    for label, value in HOSTILE_VALUES.items():
        body = text.replace('"shinjuku"', value)
        refused(attempts, partner, f"{label} as a2a+json", body, 400, "application/a2a+json")
    with attempts.refused("a Content-Length that is no number", event_type="a2a.partner.request"):
        response = partner.client.generic(
            "POST",
            "/a2a/tasks",
            text,
            content_type="application/json",
            CONTENT_LENGTH="many",
            **partner.headers(),
        )
        assert response.status_code == 400
        assert "Content-Length" in response.json()["error"]["message"]
    assert not A2AMessage.objects.exists()
