"""The §9.1 tool result envelope and its error codes."""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pydantic_core

if TYPE_CHECKING:
    from mcp_types import CallToolResult

MCPLET_TYPES = ("read", "prepare", "action")
VISIBILITIES = (["model"], ["app"], ["model", "app"])
AUTH_ENFORCEMENTS = ("strict", "host-only")


class ErrorCode(enum.StrEnum):
    """Error codes defined by §9.1; implementations may add codes prefixed with `X_`."""

    AUTH_REQUIRED = "AUTH_REQUIRED"
    AUTH_FAILED = "AUTH_FAILED"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    NOT_FOUND = "NOT_FOUND"
    RATE_LIMITED = "RATE_LIMITED"
    SERVICE_UNAVAILABLE = "SERVICE_UNAVAILABLE"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class Envelope(dict):
    """A §9.1 envelope: a plain JSON-ready dict that also carries the text for text-only hosts."""

    def __init__(self, body: dict[str, Any], text: str) -> None:
        super().__init__(body)
        self.text = text

    @property
    def is_error(self) -> bool:
        return "error" in self

    def to_call_tool_result(self) -> CallToolResult:
        from mcp_types import CallToolResult, TextContent  # only MCPlet servers need it

        return CallToolResult(
            content=[TextContent(type="text", text=self.text)],
            structured_content=dict(self),
            is_error=self.is_error,
        )


class MCPletError(Exception):
    """Raised by a tool handler to answer with an error envelope instead of a result."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        retryable: bool | None = None,
        retry_after_ms: int | None = None,
        text: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = check_error_code(code)
        self.message = message
        self.retryable = retryable
        self.retry_after_ms = retry_after_ms
        self.text = text


def utc_timestamp(moment: datetime | None = None) -> str:
    """ISO-8601 UTC with milliseconds and a `Z`, as in the spec's examples."""
    moment = (moment or datetime.now(UTC)).astimezone(UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def check_error_code(code: str) -> str:
    code = str(code)
    if code not in {c.value for c in ErrorCode} and not (code.startswith("X_") and len(code) > 2):
        raise ValueError(
            f"§9.1: error code {code!r} is neither a defined code "
            f"({', '.join(ErrorCode)}) nor prefixed with X_"
        )
    return code


def _meta(
    tool_id: str, mcplet_type: str | None, visibility: Sequence[str] | None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"timestamp": utc_timestamp(), "toolId": tool_id}
    if mcplet_type is None:  # a host answering for a tool it does not know
        return meta
    if mcplet_type not in MCPLET_TYPES:
        raise ValueError(
            f"§4: mcpletType MUST be one of read, prepare, action (got {mcplet_type!r})"
        )
    meta["mcpletType"] = mcplet_type
    if visibility is not None:
        if list(visibility) not in VISIBILITIES:
            raise ValueError(f"§8.1: visibility MUST be one of {VISIBILITIES} (got {visibility!r})")
        meta["visibility"] = list(visibility)
    return meta


def ok(
    result: Any,
    *,
    tool_id: str,
    mcplet_type: str,
    visibility: Sequence[str],
    text: str | None = None,
) -> Envelope:
    """A success envelope; its default text is the compact JSON of the whole envelope."""
    body = {
        "result": pydantic_core.to_jsonable_python(result),
        "_meta": _meta(tool_id, mcplet_type, visibility),
    }
    if text is None:
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return Envelope(body, text)


def error(
    code: str,
    message: str,
    *,
    tool_id: str,
    mcplet_type: str | None,
    visibility: Sequence[str] | None = None,
    text: str | None = None,
    retryable: bool | None = None,
    retry_after_ms: int | None = None,
) -> Envelope:
    """An error envelope; its default text is `CODE: message`. `mcplet_type=None` leaves the
    type out, for a host refusing a tool it does not know."""
    code = check_error_code(code)
    err: dict[str, Any] = {"message": message, "code": code}
    if retryable is not None:
        err["retryable"] = retryable
    if retry_after_ms is not None:
        err["retry_after_ms"] = retry_after_ms  # MGP §14.5 recovery field, as MGP spells it
    body = {"error": err, "_meta": _meta(tool_id, mcplet_type, visibility)}
    return Envelope(body, text if text is not None else f"{code}: {message}")
