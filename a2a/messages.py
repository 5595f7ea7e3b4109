"""Builders and HMAC signatures for the A2A protocol payloads of spec §18.

Every builder returns a plain dict with the spec's camelCase keys and validates it against its
§18.6 schema before returning, so the Host never emits a message its peers would refuse. Values
the caller passes in (parameters, history, results, schemas) are copied through JSON, so a builder
refuses what could not be sent (a ``datetime``, a ``set``, ``NaN``) and a later change to the
caller's objects cannot alter a message, or its signature, after the fact.

Signatures are HMAC-SHA256 over the message's canonical JSON (:func:`canonical_json`), as a hex
digest. This module is pure: it takes the key as an argument and imports nothing from Django.
"""

import hashlib
import hmac
import json
import uuid
from datetime import UTC, datetime

from .schemas import validate

STATUSES = ("success", "error", "timeout", "cancelled", "partial")


def new_id():
    """A fresh message or context id: a random UUID, as a string."""
    return str(uuid.uuid4())


def now_timestamp():
    """The current time as RFC 3339 UTC with milliseconds: ``2026-03-27T08:00:00.000Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _json_copy(value):
    return json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False))


def _id(value):
    return new_id() if value is None else str(value)


def task_request(
    sender_id,
    recipient_id,
    parameters,
    *,
    context_id=None,
    history=None,
    locale=None,
    message_id=None,
):
    """A §18.4 ``task_request`` from ``sender_id`` to ``recipient_id``.

    ``parameters`` is the task's input object (``None`` sends ``{}``); ``history`` an optional list
    of ``{"role": "system" | "user" | "assistant", "content": str}``. ``context_id`` defaults to a
    new trace id: pass the incoming one to keep a delegated workflow on one trace (§18.3).
    """
    payload = {"parameters": _json_copy({} if parameters is None else parameters)}
    if history is not None:
        payload["history"] = _json_copy(list(history))
    message = {
        "messageId": _id(message_id),
        "contextId": _id(context_id),
        "senderId": sender_id,
        "recipientId": recipient_id,
        "timestamp": now_timestamp(),
    }
    if locale is not None:
        message["locale"] = locale
    message["type"] = "task_request"
    message["payload"] = payload
    validate("task-request", message)
    return message


def task_response(request, status, *, result=None, error=None, sender_id=None):
    """The §18.5 ``task_response`` answering ``request`` (a valid ``task_request``).

    It replies to the request's ``messageId``, goes back to its sender from its recipient (or from
    ``sender_id``), and keeps its ``contextId`` and ``locale``. ``status`` is one of
    :data:`STATUSES`; ``result`` is the result object; ``error`` is
    ``{"message": str, "code": str}`` (``code`` optional) or just the message string.
    """
    validate("task-request", request)
    return response_to(request, status, result=result, error=error, sender_id=sender_id)


def response_to(request, status, *, result=None, error=None, sender_id=None):
    """:func:`task_response` to a request checked already (the bus's: validated when it was
    posted, its signature verified since); the response itself is validated all the same."""
    payload = {}
    if result is not None:
        payload["result"] = _json_copy(result)
    if error is not None:
        payload["error"] = _json_copy({"message": error} if isinstance(error, str) else error)
    message = {
        "messageId": new_id(),
        "senderId": request["recipientId"] if sender_id is None else sender_id,
        "recipientId": request["senderId"],
        "timestamp": now_timestamp(),
    }
    if "contextId" in request:
        message["contextId"] = request["contextId"]
    if "locale" in request:
        message["locale"] = request["locale"]
    message["type"] = "task_response"
    message["replyToMessageId"] = request["messageId"]
    message["status"] = status
    message["payload"] = payload
    validate("task-response", message)
    return message


def agent_card(
    agent_id,
    display_name=None,
    description=None,
    requested_pools=None,
    input_schema=None,
    output_schema=None,
    version=None,
):
    """A §18.2 Agent Card; fields left as ``None`` are omitted.

    ``requested_pools`` is advisory only (§18.1): it grants nothing.
    """
    fields = {
        "agentId": agent_id,
        "displayName": display_name,
        "description": description,
        "requestedPools": None if requested_pools is None else list(requested_pools),
        "inputSchema": input_schema,
        "outputSchema": output_schema,
        "version": version,
    }
    card = _json_copy({key: value for key, value in fields.items() if value is not None})
    validate("agent-card", card)
    return card


def canonical_json(message):
    """The bytes a signature covers: keys sorted, no whitespace, UTF-8 (not ``\\u`` escapes)."""
    return json.dumps(
        message, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def _key_bytes(key):
    key = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    if not key:
        raise ValueError("an A2A signing key must not be empty")
    return key


def sign(message, key):
    """HMAC-SHA256 of ``canonical_json(message)`` under ``key``, as 64 lowercase hex digits."""
    return hmac.new(_key_bytes(key), canonical_json(message), hashlib.sha256).hexdigest()


def verify(message, signature, key):
    """Whether ``signature`` is :func:`sign` of ``message`` under ``key`` (constant-time)."""
    key = _key_bytes(key)  # an empty key is a misconfiguration: raise, do not just say False
    if not isinstance(signature, str):
        return False
    try:
        expected = sign(message, key)
    except (TypeError, ValueError):  # not JSON-serialisable: it cannot carry a valid signature
        return False
    return hmac.compare_digest(expected.encode("ascii"), signature.strip().lower().encode("utf-8"))
