"""Our outbound A2A client: a remote agent's card, and JSON-RPC calls to it (A2A 1.0). Small on
purpose: httpx (which follows no redirect), a timeout on every call, and everything a remote
agent says checked against the vendored a2a-v1.json before the host uses it. Whatever goes
wrong — unreachable, not JSON, not A2A, an A2A error — is one RemoteError saying so, never
another exception."""

import json
import uuid

import httpx

from a2a.schemas import A2AValidationError, validate_wire

PROTOCOL_VERSION = "1.0"
TIMEOUT = 10.0  # seconds, each request
CARD_PATH = "/.well-known/agent-card.json"


class RemoteError(Exception):
    """A remote agent did not answer as A2A says it must."""


def _json(response, what):
    if response.status_code != 200:
        raise RemoteError(f"{what}: HTTP {response.status_code}")
    try:
        return json.loads(response.content)
    except (ValueError, RecursionError):
        raise RemoteError(f"{what}: the answer is not JSON") from None


def _checked(name, payload, what):
    try:
        validate_wire(name, payload)
    except A2AValidationError as exc:
        where = f" at {exc.path}" if exc.path else ""
        raise RemoteError(f"{what}: not an A2A {name}{where}: {exc.message}") from None
    return payload


def _request(method, url, headers, **kwargs):
    try:
        with httpx.Client(headers=headers, timeout=TIMEOUT) as http:
            return http.request(method, url, **kwargs)
    except (httpx.HTTPError, ValueError) as exc:  # ValueError: a URL httpx cannot use
        raise RemoteError(f"{url} cannot be reached: {exc or type(exc).__name__}") from None


def card_url(url):
    """The card's URL: `url` itself if it names a JSON document, else its well-known card."""
    return url if url.endswith(".json") else url.rstrip("/") + CARD_PATH


def fetch_card(url, headers):
    """The remote agent's AgentCard, checked."""
    response = _request("GET", card_url(url), headers)
    return _checked("AgentCard", _json(response, "its card"), "its card")


def jsonrpc_url(card):
    """Where the card says its JSON-RPC binding is (the only one we call)."""
    for interface in card.get("supportedInterfaces", []):
        if interface.get("protocolBinding") == "JSONRPC":
            return interface["url"]
    raise RemoteError("its card offers no JSONRPC interface")


def call(url, headers, method, params, result):
    """One JSON-RPC call; its result, checked against the A2A definition `result`."""
    what = f"{method} at {url}"
    body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
    response = _request("POST", url, {**headers, "A2A-Version": PROTOCOL_VERSION}, json=body)
    answer = _json(response, what)
    if not isinstance(answer, dict) or answer.get("id") != body["id"]:
        raise RemoteError(f"{what}: not a JSON-RPC answer to our request")
    if isinstance(answer.get("error"), dict):
        error = answer["error"]
        raise RemoteError(f"{what}: error {error.get('code')}: {str(error.get('message'))[:300]}")
    if "result" not in answer:
        raise RemoteError(f"{what}: the answer has neither result nor error")
    return _checked(result, answer["result"], what)


def send_message(url, headers, message):
    """SendMessage, returning at once (a Task to follow, or a Message as the whole answer)."""
    params = {"message": message, "configuration": {"returnImmediately": True}}
    validate_wire("SendMessageRequest", params)  # ours: a bug here is ours, not the remote's
    return call(url, headers, "SendMessage", params, "SendMessageResponse")


def get_task(url, headers, task_id):
    return call(url, headers, "GetTask", {"id": task_id}, "Task")
