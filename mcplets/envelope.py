"""The §9.1 tool result envelope and its error codes."""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pydantic_core

if TYPE_CHECKING:
    from mcp_types import CallToolResult

MCPLET_TYPES = ("read", "prepare", "action")
VISIBILITIES = (["model"], ["app"], ["model", "app"])
AUTH_ENFORCEMENTS = ("strict", "host-only")
# MGP §14.5: what an error may say about recovering from it, as MGP spells it.
RECOVERY_FIELDS = (
    "retryable",
    "retry_after_ms",
    "category",
    "retry_strategy",
    "max_retries",
    "fallback_tool",
    "details",
)
RECOVERY_CATEGORIES = ("security", "lifecycle", "resource", "validation", "external")
RETRY_STRATEGIES = ("immediate", "fixed_delay", "exponential_backoff")
MAX_DETAILS_CHARS = 2000


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

    def __init__(self, code: str, message: str, *, text: str | None = None, **recovery: Any):
        """`recovery`: the MGP §14.5 fields (`retryable`, `retry_after_ms`, `category`,
        `retry_strategy`, `max_retries`, `fallback_tool`, `details`) the envelope carries."""
        super().__init__(message)
        self.code = check_error_code(code)
        self.message = message
        self.recovery = _check_recovery_names(recovery)
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
    **recovery: Any,
) -> Envelope:
    """An error envelope; its default text is `CODE: message`. `mcplet_type=None` leaves the
    type out, for a host refusing a tool it does not know. `recovery` holds the MGP §14.5
    fields (`retryable`, `retry_after_ms`, ...); those left None are left out."""
    code = check_error_code(code)
    err: dict[str, Any] = {"message": message, "code": code}
    for name in _check_recovery_names(recovery):
        if recovery[name] is not None:
            err[name] = recovery[name]
    body = {"error": err, "_meta": _meta(tool_id, mcplet_type, visibility)}
    return Envelope(body, text if text is not None else f"{code}: {message}")


def _check_recovery_names(recovery: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(recovery) - set(RECOVERY_FIELDS))
    if unknown:
        raise TypeError(f"MGP §14.5 defines no recovery field {', '.join(unknown)}")
    return recovery


def recovery_hints(error: Any) -> dict[str, Any]:
    """The well-formed MGP §14.5 recovery fields of a server's error object: flat beside its
    code (as this kit writes them) or in its `_mgp` object (as MGP's JSON-RPC errors carry
    them). What is not well-formed is left out: the server is not trusted to be careful."""
    if not isinstance(error, dict):
        return {}
    found = {**error, **error["_mgp"]} if isinstance(error.get("_mgp"), dict) else error
    hints: dict[str, Any] = {}
    if isinstance(found.get("retryable"), bool):
        hints["retryable"] = found["retryable"]
    wait = found.get("retry_after_ms")
    if _number(wait) and 0 <= wait <= 86_400_000:
        hints["retry_after_ms"] = int(wait)
    if found.get("category") in RECOVERY_CATEGORIES:
        hints["category"] = found["category"]
    if found.get("retry_strategy") in RETRY_STRATEGIES:
        hints["retry_strategy"] = found["retry_strategy"]
    retries = found.get("max_retries")
    if _number(retries) and retries == int(retries) and 0 <= retries <= 100:
        hints["max_retries"] = int(retries)
    fallback = found.get("fallback_tool")
    if isinstance(fallback, str) and 0 < len(fallback) <= 200 and fallback.isprintable():
        hints["fallback_tool"] = fallback
    details = found.get("details")
    if isinstance(details, dict):
        try:
            size = len(json.dumps(details, allow_nan=False))
        except (TypeError, ValueError):
            size = None
        if size is not None and size <= MAX_DETAILS_CHARS:
            hints["details"] = details
    return hints


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
