"""A programmable MCP server whose tools come from a JSON spec file, for discovery tests.

    python -m mcplets.examples.programmable --spec spec.json [--transport stdio|streamable-http]
        [--host 127.0.0.1] [--port 8766] [--page-size N] [--calls-log calls.jsonl]
        [--protocols both|2025|2026]

The spec is `{"tools": [...], "resources": {"uri": "text", ...}, "listTtlMs": 0}` (`listTtlMs`:
the `ttlMs` of its 2026-07-28 tools/list results). Each tool entry is published as given, minus
the server-side keys `resultSchema`, `rawResource`, `result`, `answers`, `sleep`, `elicit`,
`inputRequired` and `textOnly` (the result as text content only, as before structuredContent;
`isError` when it holds an `error`);
`inputSchema` defaults to an empty object schema. Nothing is validated: the server exists to
feed a host bad tools too. `resultSchema` is served as a §9.4 payload at
`_meta.mcpletToolResultSchemaUri` (`rawResource`, when given, is served there verbatim instead)
and `result` is what tools/call returns as `structuredContent`, after `sleep` seconds (a call
is logged as soon as it arrives, so a test sees a call that ran while its caller gave up).
`answers`, when given, answers the n-th call of the tool (per server process) with its n-th item
(the last one once they run out): `{"result": ...}` as `structuredContent`, or `{"error": {code,
message, data}}` as a JSON-RPC error. `elicit` (`{"message", "requestedSchema"}`) makes the call
ask its client a form (`elicitation/create`) first; the answer is logged (`{"name", "elicited"}`)
and returned as `{"elicited": {action, content}}`. `inputRequired` is a list of rounds, each an
`inputRequests` map of 2026-07-28 (key -> embedded request such as `{"method":
"elicitation/create", "params": {"mode": "url", ...}}`): a 2026-07-28 call of the tool answers
`input_required` with the next round until the client's retries have been through them all, then
answers normally, the default result gaining the last retry's `inputResponses`. The
`requestState` it mints is sealed by the SDK's boundary, so a forged one is refused; handshake-era
calls ignore `inputRequired`. Every call is logged as `{"name", "arguments", "meta",
"requestState", "inputResponses"}` (the state as the handler saw it, unsealed).

`--protocols` picks the generations served: `both` (as any SDK server), `2025` (a pre-2026
server: `server/discover` is Method not found) or `2026` (2026-07-28 only: `initialize` is
refused with UNSUPPORTED_PROTOCOL_VERSION).

tools/list pages by `--page-size` (0: one page). The spec file is polled every 0.1 s; a change
reloads it and sends `notifications/tools/list_changed` to every connected session (and a
`ToolsListChanged` event to 2026-07-28 `subscriptions/listen` streams).

`write_spec`, `serve_http` and `stdio_params` help tests drive it.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import json
import os
import secrets
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server import CacheHint, Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcplets import serving
from mcplets.envelope import utc_timestamp
from mcplets.tools_changed import ToolsChangedNotifier, ToolsChangedServer

SERVER_ONLY_KEYS = frozenset(
    {"resultSchema", "rawResource", "result", "answers", "sleep", "elicit", "inputRequired"}
    | {"textOnly"}
)
DEFAULT_INPUT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
SCHEMA_URI_KEY = "mcpletToolResultSchemaUri"
POLL_INTERVAL = 0.1
RESOURCE_NOT_FOUND = -32002
# The directory holding the `mcplets` package: the cwd a child needs for `-m mcplets...`.
SOURCE_ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# The spec


@dataclass(frozen=True)
class Spec:
    tools: list[dict[str, Any]]  # as published on tools/list
    entries: dict[str, dict[str, Any]]  # spec entries by tool name, for tools/call
    resources: dict[str, str]  # uri -> text
    list_ttl_ms: int = 0  # tools/list's 2026-07-28 cache hint

    @classmethod
    def load(cls, path: Path) -> Spec:
        data = json.loads(path.read_text(encoding="utf-8"))
        created_at = utc_timestamp()
        tools: list[dict[str, Any]] = []
        entries: dict[str, dict[str, Any]] = {}
        resources: dict[str, str] = {}
        for entry in data.get("tools") or []:
            if not isinstance(entry, dict):
                tools.append(entry)  # not even an object: published as is all the same
                continue
            tool = {k: v for k, v in entry.items() if k not in SERVER_ONLY_KEYS}
            tool.setdefault("inputSchema", DEFAULT_INPUT_SCHEMA)
            tools.append(tool)
            if isinstance(entry.get("name"), str):
                entries.setdefault(entry["name"], entry)
            uri = _schema_uri(entry)
            if uri is None:
                continue
            if "rawResource" in entry:
                resources[uri] = str(entry["rawResource"])
            elif "resultSchema" in entry:
                resources[uri] = json.dumps(_schema_payload(entry["resultSchema"], created_at))
        # Explicit resources win over derived ones: a test may want a schema URI to say anything.
        extra = data.get("resources") or {}
        resources.update({str(uri): str(text) for uri, text in extra.items()})
        ttl = data.get("listTtlMs", 0)
        return cls(tools=tools, entries=entries, resources=resources, list_ttl_ms=ttl)


def _schema_uri(entry: Mapping[str, Any]) -> str | None:
    meta = entry.get("_meta")
    uri = meta.get(SCHEMA_URI_KEY) if isinstance(meta, Mapping) else None
    return uri if isinstance(uri, str) else None


def _schema_payload(schema: Any, created_at: str) -> dict[str, Any]:
    return {
        "version": 1,
        "schema": schema,
        "_meta": {
            "createdAt": created_at,
            "deprecated": False,
            "deprecatedAt": None,
            "sunsetDate": None,
        },
    }


def _encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode()


def _decode_cursor(cursor: Any, total: int) -> int:
    try:
        text = base64.urlsafe_b64decode(str(cursor).encode()).decode()
        prefix, _, number = text.partition(":")
        offset = int(number)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        offset = -1
        prefix = ""
    # A cursor from before a reload still works while it points inside the new list.
    if prefix != "offset" or not 0 <= offset <= total:
        raise MCPError(code=types.INVALID_PARAMS, message="Invalid cursor", data=str(cursor))
    return offset


# ---------------------------------------------------------------------------------------------
# The server


@dataclass
class ProgrammableServer:
    spec_path: Path
    page_size: int = 0
    calls_log: Path | None = None
    protocols: str = "both"
    spec: Spec = field(init=False)
    reloads: int = field(init=False, default=0)
    answered: dict[str, int] = field(init=False, default_factory=dict)  # calls by tool name

    def __post_init__(self) -> None:
        self.spec = Spec.load(self.spec_path)
        self.server = ToolsChangedServer(
            "programmable",
            version="1",
            lifespan=self._lifespan,
            # Nothing here may be cached: the spec can change under a client at any moment.
            cache_hints={
                "tools/list": CacheHint(ttl_ms=0),
                "resources/list": CacheHint(ttl_ms=0),
                "resources/read": CacheHint(ttl_ms=0),
            },
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
        )
        self.tools_changed = ToolsChangedNotifier(self.server)
        self.server.middleware.append(self._raw_tools_list)
        serving.one_generation(self.server, self.protocols)
        # The lowlevel Server has no requestState boundary of its own (MCPServer installs one):
        # without it the handler would trust whatever state a client echoes.
        self.server.middleware.append(
            RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience="programmable")
        )

    # -- tools/list

    def page(self, cursor: Any = None) -> dict[str, Any]:
        tools = self.spec.tools
        start = 0 if cursor is None else _decode_cursor(cursor, len(tools))
        end = len(tools) if self.page_size <= 0 else start + self.page_size
        page: dict[str, Any] = {"tools": tools[start:end]}
        if end < len(tools):
            page["nextCursor"] = _encode_cursor(end)
        return page

    async def _list_tools(
        self, ctx: ServerRequestContext, params: types.PaginatedRequestParams
    ) -> dict[str, Any]:
        # Declares the tools capability; every tools/list is answered by `_raw_tools_list`.
        return self.page(params.cursor)

    async def _raw_tools_list(
        self, ctx: ServerRequestContext, call_next: CallNext
    ) -> HandlerResult:
        # The SDK sieves results through its models before sending them, which drops unknown
        # tool keys and turns a non-object `_meta` into an INTERNAL_ERROR for the whole page. A
        # middleware that answers owns its result, so the page goes out exactly as the spec
        # says, on either generation: a host must defend itself against what a hostile server
        # sends, not what the SDK lets through. (2026-07-28 adds what its results must carry.)
        if ctx.method != "tools/list":
            return await call_next(ctx)
        page = self.page((ctx.params or {}).get("cursor"))
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            hints = {"ttlMs": self.spec.list_ttl_ms, "cacheScope": "private"}
            page = {"resultType": "complete", **hints, **page}
        return page

    async def serve(self, transport: str, host: str, port: int) -> None:
        await serving.serve(self.server, transport, host, port, self.protocols)

    # -- tools/call

    async def _call_tool(
        self, ctx: ServerRequestContext, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        arguments = params.arguments or {}
        # The raw `_meta` and `inputResponses`, so tests see exactly what the host sent.
        raw = ctx.params or {}
        responses = raw.get("inputResponses")
        self._log_call(params.name, arguments, raw.get("_meta"), params.request_state, responses)
        entry = self.spec.entries.get(params.name)
        if entry is None:
            return types.CallToolResult(
                content=[types.TextContent(text=f"Unknown tool: {params.name}")], is_error=True
            )
        default: dict[str, Any] = {"ok": True, "tool": params.name, "arguments": arguments}
        rounds = entry.get("inputRequired")
        if rounds and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            # The boundary only lets through state this process minted, so it parses.
            state = json.loads(params.request_state or "null") or {"call": secrets.token_hex(8)}
            # Bound to its call, as a careful server binds it: another call's state is refused.
            if state.get("arguments", arguments) != arguments:
                raise MCPError(code=types.INVALID_PARAMS, message="requestState of another call")
            done = state.get("round", 0)
            if done < len(rounds):
                minted = json.dumps(
                    {"round": done + 1, "call": state["call"], "arguments": arguments}
                )
                return types.InputRequiredResult(input_requests=rounds[done], request_state=minted)
            default["inputResponses"] = responses
        result = entry.get("result", default)
        if entry.get("answers"):
            count = self.answered[params.name] = self.answered.get(params.name, 0) + 1
            answer = entry["answers"][min(count, len(entry["answers"])) - 1]
            if "error" in answer:
                raise MCPError(**answer["error"])
            result = answer["result"]
        if entry.get("sleep"):
            await anyio.sleep(float(entry["sleep"]))
        if entry.get("elicit"):
            answer = await ctx.session.elicit_form(
                entry["elicit"]["message"],
                entry["elicit"]["requestedSchema"],
                related_request_id=ctx.request_id,
            )
            elicited = answer.model_dump(mode="json", exclude_none=True, exclude={"meta"})
            self._log(name=params.name, elicited=elicited)
            result = {"elicited": elicited}
        if entry.get("textOnly"):  # as a server of a revision before structuredContent
            is_error = isinstance(result, dict) and "error" in result
            return types.CallToolResult(
                content=[types.TextContent(text=json.dumps(result))], is_error=is_error
            )
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(result))], structured_content=result
        )

    def _log_call(
        self, name: str, arguments: Any, meta: Any, request_state: Any, input_responses: Any
    ) -> None:
        self._log(
            name=name,
            arguments=arguments,
            meta=meta,
            requestState=request_state,
            inputResponses=input_responses,
        )

    def _log(self, **line: Any) -> None:
        if self.calls_log is None:
            return
        with self.calls_log.open("a", encoding="utf-8") as log:
            log.write(json.dumps(line) + "\n")

    # -- resources

    async def _list_resources(
        self, ctx: ServerRequestContext, params: types.PaginatedRequestParams
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(uri=uri, name=uri, mime_type="application/json")
                for uri in self.spec.resources
            ]
        )

    async def _read_resource(
        self, ctx: ServerRequestContext, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        text = self.spec.resources.get(str(params.uri))
        if text is None:
            raise MCPError(
                code=RESOURCE_NOT_FOUND, message="Resource not found", data={"uri": str(params.uri)}
            )
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(uri=params.uri, mime_type="application/json", text=text)
            ]
        )

    # -- hot reload

    @contextlib.asynccontextmanager
    async def _lifespan(self, server: Server) -> AsyncIterator[dict[str, Any]]:
        # Entered once per process on both transports (stdio run, HTTP session manager).
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.watch)
            yield {}
            tg.cancel_scope.cancel()

    async def watch(self) -> None:
        seen = _file_key(self.spec_path)
        while True:
            await anyio.sleep(POLL_INTERVAL)
            key = _file_key(self.spec_path)
            if key == seen:
                continue
            seen = key
            try:
                self.spec = Spec.load(self.spec_path)
            except (OSError, ValueError, TypeError, AttributeError) as exc:
                # Keep serving the last good spec; a later write will be picked up.
                print(f"programmable: spec not reloaded: {exc!r}", file=sys.stderr)
                continue
            self.reloads += 1
            await self.tools_changed.notify()


def _file_key(path: Path) -> tuple[int, int, int] | None:
    # The inode changes on every os.replace, so even a same-mtime rewrite is noticed.
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


# ---------------------------------------------------------------------------------------------
# Running it


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, type=Path)
    parser.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--page-size", type=int, default=0)
    parser.add_argument("--calls-log", type=Path)
    parser.add_argument("--protocols", choices=serving.GENERATIONS, default="both")
    args = parser.parse_args(argv)
    programmable = ProgrammableServer(
        args.spec, page_size=args.page_size, calls_log=args.calls_log, protocols=args.protocols
    )
    anyio.run(programmable.serve, args.transport, args.host, args.port)


# ---------------------------------------------------------------------------------------------
# Test helpers


def write_spec(
    path: str | os.PathLike[str],
    tools: list[dict[str, Any]],
    resources: Mapping[str, str] | None = None,
    list_ttl_ms: int = 0,
) -> Path:
    """Write a spec atomically, with an mtime strictly later than the file it replaces
    (`list_ttl_ms`: the `ttlMs` its 2026-07-28 tools/list results carry)."""
    path = Path(path)
    data: dict[str, Any] = {"tools": tools, "listTtlMs": list_ttl_ms}
    if resources is not None:
        data["resources"] = dict(resources)
    try:
        previous = path.stat().st_mtime_ns
    except FileNotFoundError:
        previous = 0
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(data, file)
        # Two writes inside one filesystem clock tick would otherwise share an mtime.
        mtime = max(time.time_ns(), previous + 1_000_000)
        os.utime(temp, ns=(mtime, mtime))
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    return path


def _server_args(
    spec_path: str | os.PathLike[str], page_size: int, calls_log: Any, protocols: str = "both"
) -> list[str]:
    args = ["-m", "mcplets.examples.programmable", "--spec", str(Path(spec_path).resolve())]
    args += ["--page-size", str(page_size), "--protocols", protocols]
    if calls_log is not None:
        args += ["--calls-log", str(Path(calls_log).resolve())]
    return args


def stdio_params(
    spec_path: str | os.PathLike[str],
    page_size: int = 0,
    calls_log: str | os.PathLike[str] | None = None,
    *,
    protocols: str = "both",
) -> tuple[str, list[str]]:
    """The command and arguments to launch the server over stdio (run it with cwd=SOURCE_ROOT)."""
    return sys.executable, _server_args(spec_path, page_size, calls_log, protocols)


@contextlib.contextmanager
def serve_http(
    spec_path: str | os.PathLike[str],
    page_size: int = 0,
    calls_log: str | os.PathLike[str] | None = None,
    timeout: float = 20,
    port: int = 0,
    *,
    protocols: str = "both",
) -> Iterator[str]:
    """Run the server over streamable HTTP in a child process (on a free port unless `port` is
    given, e.g. to restart a server where it was); yield its `/mcp` URL."""
    port = port or serving.free_port()
    command = [sys.executable, *_server_args(spec_path, page_size, calls_log, protocols)]
    command += ["--transport", "streamable-http", "--host", "127.0.0.1", "--port", str(port)]
    with serving.listening(command, port, timeout):
        yield f"http://127.0.0.1:{port}/mcp"


if __name__ == "__main__":
    main()
