"""The §18 A2A message builders and their HMAC-SHA256 signatures."""

import ast
import copy
import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from a2a import messages, schemas
from a2a.messages import agent_card, response_to, sign, task_request, task_response, verify
from a2a.schemas import A2AValidationError, validate

KEY = b"a2a-test-key"
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def is_uuid4(value):
    return (
        isinstance(value, str) and str(uuid.UUID(value)) == value and uuid.UUID(value).version == 4
    )


@pytest.fixture
def request_message():
    return task_request(
        "director-agent",
        "info-gathering-agent",
        {"targetStores": ["shinjuku"]},
        history=[{"role": "system", "content": "You are a data analysis agent."}],
        locale="ja-JP",
    )


# --- task_request -------------------------------------------------------------------------------


def test_task_request_shape(request_message):
    message = request_message
    assert list(message) == [
        "messageId",
        "contextId",
        "senderId",
        "recipientId",
        "timestamp",
        "locale",
        "type",
        "payload",
    ]
    assert is_uuid4(message["messageId"])
    assert is_uuid4(message["contextId"])
    assert message["contextId"] != message["messageId"]
    assert message["senderId"] == "director-agent"
    assert message["recipientId"] == "info-gathering-agent"
    assert message["locale"] == "ja-JP"
    assert message["type"] == "task_request"
    assert message["payload"] == {
        "parameters": {"targetStores": ["shinjuku"]},
        "history": [{"role": "system", "content": "You are a data analysis agent."}],
    }
    validate("task-request", message)


def test_task_request_timestamp_is_utc_with_milliseconds(request_message):
    stamp = request_message["timestamp"]
    assert TIMESTAMP.match(stamp)
    when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    assert abs(datetime.now(UTC) - when) < timedelta(seconds=5)


def test_task_request_minimal_and_given_ids():
    message = task_request("a", "b", None)
    assert message["payload"] == {"parameters": {}}
    assert "locale" not in message
    context, message_id = uuid.uuid4(), str(uuid.uuid4())
    message = task_request("a", "b", {}, context_id=context, message_id=message_id)
    assert message["contextId"] == str(context)
    assert message["messageId"] == message_id


def test_task_request_ids_are_fresh():
    first, second = task_request("a", "b", {}), task_request("a", "b", {})
    assert first["messageId"] != second["messageId"]
    assert first["contextId"] != second["contextId"]


def test_task_request_copies_its_inputs():
    parameters = {"targetStores": ["shinjuku"]}
    history = [{"role": "user", "content": "hi"}]
    message = task_request("a", "b", parameters, history=history)
    parameters["targetStores"].append("shibuya")
    history[0]["content"] = "changed"
    assert message["payload"]["parameters"] == {"targetStores": ["shinjuku"]}
    assert message["payload"]["history"] == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("kwargs", "path"),
    [
        ({"parameters": ["not", "an", "object"]}, "payload.parameters"),
        ({"history": [{"role": "tool", "content": "x"}]}, "payload.history[0].role"),
        ({"history": [{"role": "user"}]}, "payload.history[0].content"),
        ({"message_id": "msg-uuid-v4"}, "messageId"),
        ({"context_id": "trace-uuid-v4"}, "contextId"),
        ({"recipient_id": None}, "recipientId"),
    ],
)
def test_task_request_refuses_to_build_an_invalid_message(kwargs, path):
    arguments = {"sender_id": "a", "recipient_id": "b", "parameters": {}} | kwargs
    with pytest.raises(A2AValidationError) as caught:
        task_request(**arguments)
    assert caught.value.path == path


def test_task_request_refuses_what_json_cannot_carry():
    with pytest.raises(TypeError):
        task_request("a", "b", {"when": datetime.now(UTC)})
    with pytest.raises(ValueError):
        task_request("a", "b", {"score": float("nan")})


# --- task_response ------------------------------------------------------------------------------


def test_task_response_mirrors_the_request(request_message):
    result = {"shinjuku": {"weather": "rain", "inventory": 500}}
    response = task_response(request_message, "success", result=result)
    assert response["type"] == "task_response"
    assert response["replyToMessageId"] == request_message["messageId"]
    assert response["senderId"] == request_message["recipientId"] == "info-gathering-agent"
    assert response["recipientId"] == request_message["senderId"] == "director-agent"
    assert response["contextId"] == request_message["contextId"]
    assert response["locale"] == "ja-JP"
    assert response["status"] == "success"
    assert response["payload"] == {"result": result}
    assert is_uuid4(response["messageId"])
    assert response["messageId"] != request_message["messageId"]
    assert TIMESTAMP.match(response["timestamp"])
    validate("task-response", response)


def test_task_response_error_forms(request_message):
    response = task_response(request_message, "error", error={"message": "down", "code": "E_X"})
    assert response["payload"] == {"error": {"message": "down", "code": "E_X"}}
    response = task_response(request_message, "error", error="down")
    assert response["payload"] == {"error": {"message": "down"}}
    with pytest.raises(A2AValidationError) as caught:
        task_response(request_message, "error", error={"code": "E_X"})
    assert caught.value.path == "payload.error.message"


@pytest.mark.parametrize("status", messages.STATUSES)
def test_task_response_every_status(request_message, status):
    response = task_response(request_message, status)
    assert response["status"] == status
    assert response["payload"] == {}


def test_task_response_bad_status(request_message):
    with pytest.raises(A2AValidationError) as caught:
        task_response(request_message, "done")
    assert caught.value.path == "status"


def test_task_response_sender_override_and_optional_fields():
    request = task_request("director-agent", "info-gathering-agent", {})
    del request["contextId"]
    response = task_response(request, "partial", result={}, sender_id="host")
    assert response["senderId"] == "host"
    assert response["recipientId"] == "director-agent"
    assert "contextId" not in response
    assert "locale" not in response
    assert response["payload"] == {"result": {}}


def test_task_response_requires_a_valid_request(request_message):
    broken = copy.deepcopy(request_message)
    del broken["messageId"]
    with pytest.raises(A2AValidationError) as caught:
        task_response(broken, "success")
    assert caught.value.path == "messageId"
    with pytest.raises(A2AValidationError):
        task_response(task_response(request_message, "success"), "success")


# --- agent_card ---------------------------------------------------------------------------------


def test_agent_card_omits_none_fields():
    assert agent_card("info-gathering-agent") == {"agentId": "info-gathering-agent"}
    card = agent_card("info-gathering-agent", description="Weather.", version="1.0.0")
    assert card == {
        "agentId": "info-gathering-agent",
        "description": "Weather.",
        "version": "1.0.0",
    }


def test_agent_card_full():
    card = agent_card(
        "info-gathering-agent",
        display_name="Information & Analysis Agent",
        description="Retrieves real-time weather and inventory data.",
        requested_pools=("info-pool",),
        input_schema={"type": "object", "properties": {"targetStores": {"type": "array"}}},
        output_schema={"type": "object", "additionalProperties": True},
        version="1.0.0",
    )
    assert card == {
        "agentId": "info-gathering-agent",
        "displayName": "Information & Analysis Agent",
        "description": "Retrieves real-time weather and inventory data.",
        "requestedPools": ["info-pool"],
        "inputSchema": {"type": "object", "properties": {"targetStores": {"type": "array"}}},
        "outputSchema": {"type": "object", "additionalProperties": True},
        "version": "1.0.0",
    }
    validate("agent-card", card)


def test_agent_card_refuses_bad_fields():
    with pytest.raises(A2AValidationError) as caught:
        agent_card("a", requested_pools=["ok", 3])
    assert caught.value.path == "requestedPools[1]"
    with pytest.raises(A2AValidationError) as caught:
        agent_card(None)
    assert caught.value.path == "agentId"


# --- signatures ---------------------------------------------------------------------------------


def test_signature_is_hex_sha256_and_verifies(request_message):
    signature = sign(request_message, KEY)
    assert re.fullmatch(r"[0-9a-f]{64}", signature)
    assert verify(request_message, signature, KEY)
    assert verify(request_message, signature.upper(), KEY)


def test_signature_is_hmac_sha256_of_the_canonical_json():
    import hashlib
    import hmac

    message = {"b": 1, "a": {"d": [1, 2], "c": "東京"}}
    canonical = '{"a":{"c":"東京","d":[1,2]},"b":1}'.encode()
    assert messages.canonical_json(message) == canonical
    assert sign(message, KEY) == hmac.new(KEY, canonical, hashlib.sha256).hexdigest()


def test_str_and_bytes_keys_agree(request_message):
    assert sign(request_message, "secret") == sign(request_message, b"secret")
    assert verify(request_message, sign(request_message, "secret"), b"secret")


def test_signature_is_stable_regardless_of_key_order(request_message):
    reordered = dict(reversed(list(request_message.items())))
    reordered["payload"] = dict(reversed(list(request_message["payload"].items())))
    assert list(reordered) != list(request_message)
    assert sign(reordered, KEY) == sign(request_message, KEY)
    assert verify(reordered, sign(request_message, KEY), KEY)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda m: m["payload"]["parameters"].update(targetStores=["shibuya"]),
        lambda m: m["payload"]["history"].append({"role": "user", "content": "and more"}),
        lambda m: m.update(recipientId="admin-agent"),
        lambda m: m.update(senderId="someone-else"),
        lambda m: m.update(timestamp="2026-03-27T08:00:00.001Z"),
        lambda m: m.pop("locale"),
        lambda m: m.update(extra=None),
    ],
)
def test_any_change_breaks_the_signature(request_message, tamper):
    signature = sign(request_message, KEY)
    tampered = copy.deepcopy(request_message)
    tamper(tampered)
    assert not verify(tampered, signature, KEY)


def test_wrong_key_or_signature_fails(request_message):
    signature = sign(request_message, KEY)
    assert not verify(request_message, signature, b"another-key")
    assert not verify(request_message, signature[:-1], KEY)
    assert not verify(request_message, "", KEY)
    assert not verify(request_message, "é" * 64, KEY)
    assert not verify(request_message, None, KEY)
    assert not verify(request_message, signature.encode(), KEY)


def test_unsignable_messages():
    assert not verify({"when": datetime.now(UTC)}, "0" * 64, KEY)
    with pytest.raises(TypeError):
        sign({"when": datetime.now(UTC)}, KEY)


def test_empty_key_is_refused(request_message):
    with pytest.raises(ValueError, match="empty"):
        sign(request_message, b"")
    with pytest.raises(ValueError, match="empty"):
        verify(request_message, "0" * 64, "")


def test_responses_sign_too(request_message):
    response = task_response(request_message, "success", result={"ok": True})
    signature = sign(response, KEY)
    assert verify(response, signature, KEY)
    assert not verify(response | {"status": "error"}, signature, KEY)


def test_messages_and_schemas_do_not_import_django():
    for module in (messages, schemas):
        with open(module.__file__, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        imported = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        imported |= {
            node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        }
        assert not any(name.split(".")[0] == "django" for name in imported), module.__name__


def test_a_response_to_a_checked_request_is_the_same_and_still_validated(request_message):
    # The bus's stored request was validated when posted and its signature verified since.
    built = response_to(request_message, "success", result={"ok": True})
    expected = task_response(request_message, "success", result={"ok": True})
    assert {**built, "messageId": "", "timestamp": ""} == {
        **expected,
        "messageId": "",
        "timestamp": "",
    }
    with pytest.raises(A2AValidationError):
        response_to(request_message, "done")
    with pytest.raises(A2AValidationError):
        response_to(request_message, "success", result=["not", "an", "object"])
