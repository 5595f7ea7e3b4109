"""A tiny OpenAI-compatible chat-completions server on loopback, so tests exercise litellm's real
HTTP request/response path: `with openai_stub([tool_call_response(...), text_response(...)]) as
(base_url, requests): ...`. Each request is recorded; each answer comes from the queue, in the
real OpenAI JSON shape, or as an HTTP error (`error_response(500)`, `error_response(429)`)."""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)


@dataclass(frozen=True)
class Canned:
    """One canned answer: HTTP status, JSON body, extra headers, seconds to wait first."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def _completion(message: dict[str, Any], finish_reason: str, model: str) -> dict[str, Any]:
    n = next(_ids)
    return {
        "id": f"chatcmpl-stub-{n}",
        "object": "chat.completion",
        "created": 1_700_000_000 + n,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28},
    }


def tool_call_response(
    name: str,
    arguments: dict[str, Any] | str,
    *,
    call_id: str = "call_stub_1",
    model: str = "stub-model",
) -> Canned:
    """A 200 answer with one tool call; a str `arguments` is sent as is (e.g. broken JSON)."""
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        ],
    }
    return Canned(200, _completion(message, "tool_calls", model))


def text_response(text: str, *, model: str = "stub-model", finish_reason: str = "stop") -> Canned:
    message = {"role": "assistant", "content": text}
    return Canned(200, _completion(message, finish_reason, model))


def error_response(status: int, message: str = "stub error", **headers: str) -> Canned:
    """An OpenAI-style error; `retry_after="0"` becomes a `Retry-After: 0` header."""
    body = {"error": {"message": message, "type": "stub_error", "param": None, "code": None}}
    return Canned(status, body, {k.replace("_", "-").title(): v for k, v in headers.items()})


def slow(seconds: float, answer: Canned) -> Canned:
    """`answer`, sent only after `seconds` (for client timeouts)."""
    return replace(answer, delay=seconds)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as httpx expects from an API server

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        stub = self.server.stub  # type: ignore[attr-defined]
        with stub.lock:
            stub.requests.append({"path": self.path, "headers": dict(self.headers), "json": body})
            if self.path.rstrip("/") != "/v1/chat/completions":
                answer = error_response(404, f"stub: no route {self.path}")
            elif stub.respond is not None:
                answer = stub.respond(body)
            elif stub.responses:
                answer = stub.responses.pop(0)
            else:
                # Not 5xx: running out of answers is a test bug, and must not be retried.
                answer = error_response(400, "stub: no canned response left")
        if answer.delay:
            time.sleep(answer.delay)
        data = json.dumps(answer.body).encode()
        try:
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in answer.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting (a timeout test)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base signature
        pass  # keep test output clean


class _Stub:
    def __init__(self, responses: list[Canned] | Callable[[dict], Canned]) -> None:
        self.respond = responses if callable(responses) else None
        self.responses = [] if callable(responses) else list(responses)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()


@contextlib.contextmanager
def openai_stub(
    responses: list[Canned] | Callable[[dict], Canned],
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Serve `responses` in order on 127.0.0.1 (a free port), or answer each request body with
    `responses(body)`; yields the base URL (`.../v1`) and the list of recorded requests
    (`path`, `headers`, `json`)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.block_on_close = False  # a slow answer still sleeping must not hold up the test
    server.stub = _Stub(responses)  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, name="openai-stub", daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host}:{port}/v1", server.stub.requests  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
