"""What the restaurant MCPlets share: the backing-service client, answers with a readable text,
the exact arguments of a strict call, and the command line (stdio or streamable HTTP)."""

import argparse
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from mcplets import Envelope, ErrorCode, MCPletError, ok, serving

API_URL_ENV = "RESTAURANT_API_URL"
API_TOKEN_ENV = "RESTAURANT_API_TOKEN"  # noqa: S105 (a variable name)
DEFAULT_API_URL = "http://127.0.0.1:5100"
TIMEOUT = 15.0


def api_url() -> str:
    return (os.environ.get(API_URL_ENV) or DEFAULT_API_URL).rstrip("/")


def _request(method: str, path: str, *, params=None, body=None, headers=None) -> dict[str, Any]:
    query = {k: v for k, v in (params or {}).items() if v not in (None, "")}
    url = api_url() + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
    if not url.startswith(("http://", "https://")):
        raise MCPletError(
            ErrorCode.SERVICE_UNAVAILABLE, f"{API_URL_ENV} is not an http(s) URL", retryable=False
        )
    data = None if body is None else json.dumps(body, ensure_ascii=False).encode()
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (checked)
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise _service_error(exc) from None
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise MCPletError(
            ErrorCode.SERVICE_UNAVAILABLE,
            f"the restaurant service at {api_url()} is unreachable: {reason}",
            retryable=True,
            retry_after_ms=5000,
        ) from None


def _service_error(exc: urllib.error.HTTPError) -> MCPletError:
    try:
        detail = json.loads(exc.read()).get("error") or {}
    except (ValueError, AttributeError):
        detail = {}
    message = detail.get("message") or f"HTTP {exc.code}"
    if exc.code == 400:
        return MCPletError(ErrorCode.VALIDATION_ERROR, message)
    if exc.code == 404:
        return MCPletError(ErrorCode.NOT_FOUND, message)
    if exc.code in (401, 403):
        return MCPletError(
            ErrorCode.SERVICE_UNAVAILABLE,
            f"the restaurant service refused this server ({message}); check {API_TOKEN_ENV}",
            retryable=False,
        )
    return MCPletError(
        ErrorCode.SERVICE_UNAVAILABLE,
        f"the restaurant service failed: {message}",
        retryable=True,
        retry_after_ms=5000,
    )


def api_get(path: str, **params: Any) -> dict[str, Any]:
    return _request("GET", path, params=params)


def api_post(path: str, body: dict[str, Any], *, idempotency_key: str | None = None):
    headers = {}
    if os.environ.get(API_TOKEN_ENV):
        headers["Authorization"] = f"Bearer {os.environ[API_TOKEN_ENV]}"
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    return _request("POST", path, body=body, headers=headers)


@dataclass(frozen=True)
class Tool:
    """A tool's identity, for envelopes built by hand (to give them a readable text)."""

    name: str
    mcplet_type: str
    visibility: tuple[str, ...]

    def answer(self, result: Any, summary: str) -> Envelope:
        """A success envelope whose text is a summary for people, then the data as JSON."""
        data = json.dumps(result, ensure_ascii=False)
        return ok(
            result,
            tool_id=self.name,
            mcplet_type=self.mcplet_type,
            visibility=list(self.visibility),
            text=f"{summary}\n\n{data}",
        )


def call_arguments(ctx: Context, parsed: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments exactly as the host sent them (the approval is bound to these, defaults
    left out included), falling back to the parsed ones."""
    params = ctx.request_context.params
    raw = params.get("arguments") if isinstance(params, Mapping) else None
    return dict(raw) if isinstance(raw, Mapping) else dict(parsed)


def request_meta(ctx: Context, key: str) -> Any:
    meta = ctx.request_context.meta
    if meta is None:
        return None
    return meta.get(key) if isinstance(meta, Mapping) else getattr(meta, key, None)


def main(server: MCPServer, default_port: int, doc: str, argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    parser.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="streamable HTTP: interface to bind")
    parser.add_argument("--port", type=int, default=default_port, help="streamable HTTP port")
    args = parser.parse_args(argv)
    with serving.traced(server.name):
        if args.transport == "stdio":
            server.run()
        else:
            server.run("streamable-http", host=args.host, port=args.port)
