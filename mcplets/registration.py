"""Code-first MCPlet registration over `MCPServer` (spec §5.1) and result schema resources (§9)."""

import functools
import inspect
import json
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from typing import Any, NotRequired, TypedDict, Unpack

import anyio.to_thread
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import Draft202012Validator, validator_for
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.context_injection import find_context_parameter
from mcp_types import CallToolResult

from mcplets.envelope import (
    AUTH_ENFORCEMENTS,
    MCPLET_TYPES,
    VISIBILITIES,
    Envelope,
    ErrorCode,
    MCPletError,
    error,
    ok,
    utc_timestamp,
)

logger = logging.getLogger(__name__)

DISPLAY_MODES = ("inline", "fullscreen", "pip", "llm-inline", "llm-fullscreen", "llm-pip")


class MCPletRegistrationError(ValueError):
    """A registration that breaks a MUST of the MCPlet spec."""


class MCPletRegistrationWarning(UserWarning):
    """A registration that goes against a SHOULD of the MCPlet spec."""


class ToolOptions(TypedDict):
    """Keyword arguments of the `register_*_tool` helpers (see `register_tool`)."""

    mcplet_type: str
    description: str
    title: NotRequired[str | None]
    pool: NotRequired[str | None]
    auth: NotRequired[Mapping[str, Any] | None]
    result_schema: NotRequired[dict[str, Any] | None]
    result_schema_version: NotRequired[int]
    ui: NotRequired[Mapping[str, Any] | None]


def result_schema_uri(tool_id: str, version: int = 1) -> str:
    """The §9.3 canonical URI: v1 has no version suffix, later majors end in `/v{major}`."""
    base = f"mcplet://tool-result-schema/{tool_id}"
    return base if version == 1 else f"{base}/v{version}"


def register_result_schema(
    server: MCPServer,
    tool_id: str,
    schema: dict[str, Any],
    *,
    version: int = 1,
    created_at: datetime | str | None = None,
    deprecated_at: datetime | str | None = None,
    sunset_date: date | str | None = None,
) -> str:
    """Serve a result schema as an MCP resource with the §9.4 payload and return its URI.

    Call it directly to keep serving an older, deprecated major next to the current one (§9.5).
    """
    _check_schema(schema)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise MCPletRegistrationError(
            f"§9.3: a schema version is a major number >= 1 ({version!r})"
        )
    if sunset_date is not None and deprecated_at is None:
        raise MCPletRegistrationError("§9.5: a sunset date belongs to a deprecated schema")
    uri = result_schema_uri(tool_id, version)
    text = json.dumps(
        result_schema_payload(schema, version, created_at, deprecated_at, sunset_date),
        ensure_ascii=False,
    )

    def read_schema() -> str:
        return text

    server.resource(
        uri,
        name=f"{tool_id} result schema v{version}",
        description=f"Result schema of the MCPlet tool {tool_id}, major version {version}",
        mime_type="application/json",
    )(read_schema)
    return uri


def result_schema_payload(
    schema: dict[str, Any],
    version: int = 1,
    created_at: datetime | str | None = None,
    deprecated_at: datetime | str | None = None,
    sunset_date: date | str | None = None,
) -> dict[str, Any]:
    """The §9.4 payload of a result schema resource."""
    return {
        "version": version,
        "schema": schema,
        "_meta": {
            "createdAt": _iso(created_at) or utc_timestamp(),
            "deprecated": deprecated_at is not None,
            "deprecatedAt": _iso(deprecated_at),
            "sunsetDate": _iso(sunset_date),
        },
    }


def register_model_tool(
    server: MCPServer, name: str, fn: Callable[..., Any], **options: Unpack[ToolOptions]
) -> dict[str, Any]:
    """Register a tool the LLM may call (`visibility: ["model"]`). See `register_tool`."""
    return register_tool(server, name, fn, visibility=["model"], **options)


def register_app_tool(
    server: MCPServer, name: str, fn: Callable[..., Any], **options: Unpack[ToolOptions]
) -> dict[str, Any]:
    """Register a tool only host-controlled paths may call (`visibility: ["app"]`)."""
    return register_tool(server, name, fn, visibility=["app"], **options)


def register_dual_tool(
    server: MCPServer, name: str, fn: Callable[..., Any], **options: Unpack[ToolOptions]
) -> dict[str, Any]:
    """Register a tool both the LLM and the host may call (`visibility: ["model", "app"]`)."""
    return register_tool(server, name, fn, visibility=["model", "app"], **options)


def register_tool(
    server: MCPServer,
    name: str,
    fn: Callable[..., Any],
    *,
    visibility: Sequence[str],
    mcplet_type: str,
    description: str,
    title: str | None = None,
    pool: str | None = None,
    auth: Mapping[str, Any] | None = None,
    result_schema: dict[str, Any] | None = None,
    result_schema_version: int = 1,
    ui: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Register `fn` as an MCPlet tool and return the `_meta` it publishes.

    The input schema comes from `fn`'s typed signature, as with `MCPServer.tool`. `fn` may be
    sync or async and may take a `Context`. What it returns becomes a §9.1 envelope in
    `structuredContent`; an `Envelope` or `CallToolResult` passes through, an `MCPletError`
    becomes an error envelope. A `strict` tool called without `params._meta.mcplet_auth` is
    answered with AUTH_REQUIRED and `fn` is not run.
    """
    visibility = list(visibility)
    meta = tool_meta(visibility, mcplet_type, description, pool, auth, ui)
    validator = None
    if result_schema is not None:
        meta["mcpletToolResultSchemaUri"] = register_result_schema(
            server, name, result_schema, version=result_schema_version
        )
        validator = validator_for(result_schema, default=Draft202012Validator)(result_schema)
    identity = {"tool_id": name, "mcplet_type": mcplet_type, "visibility": visibility}
    strict = auth is not None and auth["enforcement"] == "strict"
    server.add_tool(
        _handler(fn, identity, strict, validator),
        name=name,
        title=title,
        description=description,
        meta=meta,
        # The envelope is the structured content; MCPServer must not build its own.
        structured_output=False,
    )
    return meta


def model_tool(server: MCPServer, name: str | None = None, **options: Any):
    """Decorator form of `register_model_tool`; name and description default to `fn`'s."""
    return _decorator(register_model_tool, server, name, options)


def app_tool(server: MCPServer, name: str | None = None, **options: Any):
    """Decorator form of `register_app_tool`."""
    return _decorator(register_app_tool, server, name, options)


def dual_tool(server: MCPServer, name: str | None = None, **options: Any):
    """Decorator form of `register_dual_tool`."""
    return _decorator(register_dual_tool, server, name, options)


def mcplet_auth_from(ctx: Context) -> dict[str, Any] | None:
    """The Passkey assertion the host injected into `params._meta.mcplet_auth` (§7.3), or None."""
    auth = (ctx.request_context.meta or {}).get("mcplet_auth")
    return auth if isinstance(auth, dict) else None


def _decorator(register: Callable[..., Any], server: MCPServer, name: str | None, options):
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        description = options.get("description") or inspect.getdoc(fn)
        register(server, name or fn.__name__, fn, **{**options, "description": description})
        return fn

    return decorate


def tool_meta(visibility, mcplet_type, description, pool, auth, ui) -> dict[str, Any]:
    """The `_meta` of a registration, checked against the spec's MUSTs (and SHOULDs: warned)."""
    if visibility not in VISIBILITIES:
        raise MCPletRegistrationError(
            f"§8.1: visibility MUST be one of {VISIBILITIES} (got {visibility!r})"
        )
    if mcplet_type not in MCPLET_TYPES:
        raise MCPletRegistrationError(
            f"§4: mcpletType MUST be one of read, prepare, action (got {mcplet_type!r})"
        )
    if not description:
        raise MCPletRegistrationError("§5.1: a registration MUST provide a description")
    meta: dict[str, Any] = {"mcpletType": mcplet_type, "visibility": visibility}
    if pool is not None:
        if not isinstance(pool, str) or not pool:
            raise MCPletRegistrationError(f"§6.2: pool is a non-empty string (got {pool!r})")
        meta["pool"] = pool
    if ui is not None:
        meta["ui"] = _check_ui(ui)
    if auth is not None:
        meta["auth"] = _check_auth(auth)
    elif mcplet_type == "action" and "model" in visibility:
        raise MCPletRegistrationError(
            "§4.2/§5.3.1: an action tool whose visibility contains 'model' MUST declare "
            "_meta.auth (Passkey with backend enforcement or host interception); "
            "hosts reject it otherwise"
        )
    elif mcplet_type == "action":
        warnings.warn(
            "§5.1: action tools SHOULD declare _meta.auth", MCPletRegistrationWarning, stacklevel=4
        )
    if mcplet_type == "read" and auth is not None:
        warnings.warn(
            "§4.2: read tools SHOULD NOT require Passkey authentication",
            MCPletRegistrationWarning,
            stacklevel=4,
        )
    return meta


def _check_auth(auth: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(auth, Mapping):
        raise MCPletRegistrationError(f"§6.7: auth is an object (got {auth!r})")
    unknown = set(auth) - {"required", "enforcement", "promptMessage"}
    if unknown:
        raise MCPletRegistrationError(f"§6.7: unknown auth keys {sorted(unknown)}")
    if auth.get("required") != "passkey":
        raise MCPletRegistrationError(
            f"§6.7/§7.1.1: auth.required MUST be 'passkey' (got {auth.get('required')!r})"
        )
    if auth.get("enforcement") not in AUTH_ENFORCEMENTS:
        raise MCPletRegistrationError(
            f"§6.7: auth.enforcement MUST be 'strict' or 'host-only' "
            f"(got {auth.get('enforcement')!r})"
        )
    if not isinstance(auth.get("promptMessage", ""), str):
        raise MCPletRegistrationError("§6.7: auth.promptMessage is a string")
    return dict(auth)


def _check_ui(ui: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(ui, Mapping):
        raise MCPletRegistrationError(f"§6.5: ui is an object (got {ui!r})")
    if "displayMode" in ui and ui["displayMode"] not in DISPLAY_MODES:
        raise MCPletRegistrationError(
            f"§6.6: ui.displayMode MUST be one of {', '.join(DISPLAY_MODES)} "
            f"(got {ui['displayMode']!r})"
        )
    return dict(ui)


def _check_schema(schema: dict[str, Any]) -> None:
    try:
        validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError as exc:
        raise MCPletRegistrationError(
            f"§9.4: result_schema is not a valid JSON Schema: {exc.message}"
        ) from exc


def _iso(value: date | datetime | str | None) -> str | None:
    if isinstance(value, datetime):
        return utc_timestamp(value)
    if isinstance(value, date):
        return value.isoformat()
    return value


def _handler(
    fn: Callable[..., Any],
    identity: dict[str, Any],
    strict: bool,
    validator: Validator | None,
) -> Callable[..., Any]:
    """Wrap `fn` so it always answers with an envelope and always receives a Context.

    The wrapper publishes `fn`'s own signature (plus a Context parameter when `fn` has none),
    so MCPServer derives the same input schema as for `fn` and injects the Context.
    """
    signature = inspect.signature(fn, eval_str=True)
    ctx_name = find_context_parameter(fn)
    params = list(signature.parameters.values())
    if ctx_name is None:
        params.append(
            inspect.Parameter("mcplet_ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)
        )
    is_async = inspect.iscoroutinefunction(fn)

    @functools.wraps(fn)
    async def handler(**kwargs: Any) -> CallToolResult:
        ctx = kwargs[ctx_name] if ctx_name else kwargs.pop("mcplet_ctx")
        if strict and mcplet_auth_from(ctx) is None:
            return error(
                ErrorCode.AUTH_REQUIRED,
                "this tool needs a Passkey assertion in params._meta.mcplet_auth",
                **identity,
            ).to_call_tool_result()
        try:
            if is_async:
                result = await fn(**kwargs)
            else:
                result = await anyio.to_thread.run_sync(functools.partial(fn, **kwargs))
        except MCPletError as exc:
            result = error(
                exc.code,
                exc.message,
                text=exc.text,
                **exc.recovery,
                **identity,
            )
        if isinstance(result, CallToolResult):
            return result
        if not isinstance(result, Envelope):
            result = ok(result, **identity)
        if validator is not None and not result.is_error:
            problem = next(iter(validator.iter_errors(result["result"])), None)
            if problem is not None:
                # §9.2: a declared schema is a promise to the host; break it loudly here.
                logger.error("Tool %r result breaks its schema: %s", identity["tool_id"], problem)
                result = error(
                    ErrorCode.UNKNOWN_ERROR,
                    "the tool's result does not match its declared result schema",
                    **identity,
                )
        return result.to_call_tool_result()

    handler.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=params, return_annotation=inspect.Signature.empty
    )
    handler.__annotations__ = {
        p.name: p.annotation for p in params if p.annotation is not inspect.Parameter.empty
    }
    return handler
