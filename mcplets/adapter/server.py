"""The adapter: an MCPlet server in front of an MCP server that is not one.

It connects to the upstream as a client and publishes only the tools its configuration names,
each with the declared contract. A call is checked before anything reaches the upstream: the
tool must be published, its arguments must meet the configured constraints, and a `strict` tool
must carry a passkey assertion the host verifies for exactly this call. The upstream gets the
arguments only, never the request's `_meta` (the assertion is the host's business). Answers are
§9.1 envelopes.

It speaks both protocol generations on both sides: upstream, the newest one the upstream speaks
(2026-07-28 or the 2025-11-25 handshake); to its own clients, whichever they open with. An
upstream's 2026-07-28 `input_required` answer is passed to a 2026-07-28 client as it came, and the
client's retry (its `inputResponses` and the opaque `requestState`) goes upstream as it came; a
2025-11-25 client cannot carry such a round, so it gets an error envelope instead.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from jsonschema.validators import Draft202012Validator, validator_for
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import SubscriptionLost, listen
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcplets.adapter.config import AdapterConfig, ToolContract
from mcplets.adapter.upstream_auth import SECRET_ENV, Credentials, UpstreamHttp
from mcplets.envelope import Envelope, ErrorCode, error, ok
from mcplets.registration import result_schema_payload, result_schema_uri
from mcplets.tools_changed import ToolsChangedNotifier, ToolsChangedServer
from mcplets.verify import TOKEN_ENV, URL_ENV, averify_assertion

logger = logging.getLogger(__name__)

TIMEOUT = 30.0
PING_INTERVAL = 5.0
# What a stdio upstream must never see: the adapter's own verify-assertion credentials, and
# its OAuth client for an HTTP upstream.
PRIVATE_ENV = (URL_ENV, TOKEN_ENV, *SECRET_ENV)
RESOURCE_NOT_FOUND = -32002
# An upstream's refused arguments, as the SDKs word them in an error result (not a JSON-RPC
# error): TypeScript "MCP error -32602: Input validation error: Invalid arguments for tool t:
# ...", Python MCPServer "Error executing tool t: 1 validation error for tArguments ...".
INVALID_ARGUMENTS = re.compile(
    r"^(MCP error -32602\b|Input validation error\b|Invalid arguments for tool\b"
    r"|Error executing tool \S+: \d+ validation errors? for \S+Arguments\b)"
)


class UpstreamGone(Exception):
    """The upstream closed its connection: the adapter has nothing left to serve."""


class UpstreamRefused(UpstreamGone):
    """The upstream would not let the adapter in (its OAuth): nothing to serve either."""


@dataclass(frozen=True)
class Upstream:
    """How to reach the upstream server: a stdio command, or a streamable-HTTP URL."""

    command: Sequence[str] = ()
    url: str = ""

    def __str__(self) -> str:
        return self.url or " ".join(self.command)


@contextlib.asynccontextmanager
async def upstream_session(
    upstream: Upstream, message_handler: Any = None, timeout: float = TIMEOUT
) -> AsyncIterator[ClientSession]:
    """A client session to the upstream, negotiated by the SDK's `auto` policy: 2026-07-28
    when the upstream answers `server/discover`, else the 2025 `initialize` handshake. An HTTP
    upstream behind OAuth is reached with the client credentials in the environment
    (`upstream_auth`); one that refuses the adapter raises `UpstreamRefused`."""
    async with contextlib.AsyncExitStack() as stack:
        http: UpstreamHttp | None = None
        if upstream.url:
            try:
                http = UpstreamHttp(upstream.url, Credentials.from_env())
            except ValueError as exc:
                raise UpstreamRefused(str(exc)) from None
            client_http = await stack.enter_async_context(http.client())
            target: Any = streamable_http_client(upstream.url, http_client=client_http)
        else:
            env = {k: v for k, v in os.environ.items() if k not in PRIVATE_ENV}
            command, *args = upstream.command
            target = StdioServerParameters(command=command, args=args, env=env)
        # No response cache: the adapter re-lists the upstream's tools exactly when they changed.
        client = Client(
            target,
            mode="auto",
            read_timeout_seconds=timeout,
            message_handler=message_handler,
            cache=None,
        )
        try:
            await stack.enter_async_context(client)
        except Exception as exc:
            refusal = http.refusal(exc) if http is not None else None
            if refusal is None:
                raise
            raise UpstreamRefused(refusal) from None  # the message says it all
        yield client.session


async def list_upstream_tools(session: ClientSession) -> list[types.Tool]:
    tools, cursor = [], None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


@dataclass(frozen=True)
class Published:
    """A configured tool the upstream offers: what tools/list shows and how calls are checked."""

    contract: ToolContract
    tool: types.Tool
    arguments: Any  # jsonschema validators, or None
    result: Any

    @classmethod
    def of(cls, contract: ToolContract, upstream: types.Tool) -> Published:
        description = contract.description or upstream.description or contract.name
        meta = contract.meta(description)
        if contract.result_schema is not None:
            meta["mcpletToolResultSchemaUri"] = result_schema_uri(contract.name)
        tool = types.Tool(
            name=contract.name,
            title=contract.title or upstream.title,
            description=description,
            input_schema=upstream.input_schema,
            meta=meta,
        )
        return cls(
            contract, tool, _validator(contract.arguments), _validator(contract.result_schema)
        )


class Adapter:
    """The adapter's MCP server (`self.server`), its upstream session and published tools."""

    def __init__(
        self,
        config: AdapterConfig,
        upstream: Upstream,
        on_gone: Callable[[UpstreamGone], None] | None = None,
    ) -> None:
        self.config = config
        self.upstream = upstream
        self.on_gone = on_gone  # told before the server unwinds (which stdio cannot promptly)
        self.published: dict[str, Published] = {}
        self.session: ClientSession | None = None
        self.server = ToolsChangedServer(
            config.server,
            version="1",
            lifespan=self._lifespan,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
        )
        self.tools_changed = ToolsChangedNotifier(self.server)
        self._schemas = {
            result_schema_uri(c.name): json.dumps(result_schema_payload(c.result_schema))
            for c in config.tools.values()
            if c.result_schema is not None
        }

    # -- the upstream

    async def refresh(self) -> list[str]:
        """Re-list the upstream's tools and re-apply the configuration; the names published."""
        offered = {t.name: t for t in await list_upstream_tools(self.session)}
        published = {}
        for contract in self.config.tools.values():
            if contract.upstream in offered:
                published[contract.name] = Published.of(contract, offered[contract.upstream])
        missing = [c.upstream for c in self.config.tools.values() if c.upstream not in offered]
        if missing:
            logger.warning("%s offers no tool %s", self.upstream, ", ".join(sorted(missing)))
        unconfigured = sorted(set(offered) - {c.upstream for c in self.config.tools.values()})
        if unconfigured:
            logger.info("not published (not in the configuration): %s", ", ".join(unconfigured))
        self.published = published
        return sorted(published)

    @contextlib.asynccontextmanager
    async def _lifespan(self, server: Server) -> AsyncIterator[dict[str, Any]]:
        # One slot: changes that arrive while the list is being re-read make one more re-read.
        send, receive = anyio.create_memory_object_stream[None](1)

        def changed() -> None:
            with contextlib.suppress(anyio.WouldBlock):
                send.send_nowait(None)

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                changed()

        try:
            async with (
                upstream_session(self.upstream, on_message) as session,
                anyio.create_task_group() as tg,
            ):
                self.session = session
                published = ", ".join(await self.refresh())
                logger.info("publishing %s from %s", published, self.upstream)
                tools = session.server_capabilities.tools
                if _modern(session) and tools is not None and tools.list_changed:
                    tg.start_soon(self._listen, changed)
                tg.start_soon(self._follow, receive)
                tg.start_soon(self._watch)
                yield {}
                tg.cancel_scope.cancel()
        except* UpstreamGone as gone:
            if self.on_gone is not None:
                self.on_gone(first_cause(gone))
            raise

    async def _listen(self, changed) -> None:
        """2026-07-28 servers send list changes on a subscription stream, not to the session.
        A stream has no replay, so each one starts with a re-read; one that ends is opened
        again, unless it ended because the connection did."""
        while True:
            try:
                async with listen(self.session, tools_list_changed=True) as events:
                    changed()
                    async for _ in events:
                        changed()
            except (SubscriptionLost, MCPError) as lost:
                # Lost before its acknowledgement, the stream raises the bare MCPError.
                cause = lost if isinstance(lost, MCPError) else lost.__cause__
                if isinstance(cause, MCPError) and cause.code == types.CONNECTION_CLOSED:
                    # Said here rather than left to `_watch`: over HTTP its next request to a
                    # dead server would fail the whole client with a transport error instead.
                    raise self._gone() from lost
                logger.warning("the upstream's change subscription was lost: %s", lost)
            await anyio.sleep(PING_INTERVAL)

    async def _watch(self) -> None:
        """Exit when the upstream is gone (a crashed process, a closed HTTP session), so that
        whoever launched the adapter sees the server go and reconnects, relaunching both."""
        while True:
            await anyio.sleep(PING_INTERVAL)
            try:
                if _modern(self.session):
                    # 2026-07-28 has no ping; `server/discover` is its cheapest request.
                    await self.session.send_discover(self.session.protocol_version)
                else:
                    await self.session.send_ping()
            except MCPError as exc:
                if exc.code == types.CONNECTION_CLOSED:
                    raise self._gone() from exc

    def _gone(self) -> UpstreamGone:
        return UpstreamGone(f"the upstream server {self.upstream} is gone")

    async def _follow(self, receive) -> None:
        """Re-apply the configuration on every upstream list change; tell our clients when
        what we publish changed (a new upstream tool the configuration does not name: not)."""
        async for _ in receive:
            before = {n: p.tool for n, p in self.published.items()}
            try:
                await self.refresh()
            except (MCPError, anyio.ClosedResourceError, TimeoutError) as exc:
                logger.warning("the upstream's tools could not be listed again: %r", exc)
                continue
            if {n: p.tool for n, p in self.published.items()} != before:
                await self.tools_changed.notify()

    # -- the MCP server

    async def _list_tools(
        self, ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[p.tool for p in self.published.values()])

    async def _call_tool(
        self, ctx: ServerRequestContext, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        answer = await self.call(
            params, ctx.params, rounds=ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        )
        if isinstance(answer, types.InputRequiredResult):
            return answer
        return answer.to_call_tool_result()

    async def call(
        self, params: types.CallToolRequestParams, raw_params: Any, *, rounds: bool
    ) -> Envelope | types.InputRequiredResult:
        """`rounds`: whether the client's session carries `input_required` rounds."""
        name, arguments = params.name, params.arguments or {}
        published = self.published.get(name)
        if published is None:
            # Not configured (or no longer offered): nothing goes upstream.
            message = f"no tool {name!r} is published here"
            return error(ErrorCode.NOT_FOUND, message, tool_id=name, mcplet_type=None)
        contract = published.contract
        identity = {
            "tool_id": contract.name,
            "mcplet_type": contract.mcplet_type,
            "visibility": contract.visibility,
        }
        if published.arguments is not None:
            problem = next(iter(published.arguments.iter_errors(arguments)), None)
            if problem is not None:
                where = "/".join(str(p) for p in problem.absolute_path) or "(the arguments)"
                return error(
                    ErrorCode.VALIDATION_ERROR,
                    f"{where}: {problem.message} (the adapter's configured constraint)",
                    **identity,
                )
        if contract.strict:
            meta = (raw_params or {}).get("_meta") if isinstance(raw_params, dict) else None
            auth = meta.get("mcplet_auth") if isinstance(meta, dict) else None
            refused = await averify_assertion(
                auth if isinstance(auth, dict) else None,
                contract.name,
                arguments,
                mcplet_type=contract.mcplet_type,
                visibility=contract.visibility,
            )
            if refused is not None:
                return refused
        # Every round of a call is checked like its first: the state it carries is the upstream's.
        return await self._forward(published, params, identity, rounds=rounds)

    async def _forward(
        self,
        published: Published,
        params: types.CallToolRequestParams,
        identity: dict[str, Any],
        *,
        rounds: bool,
    ) -> Envelope | types.InputRequiredResult:
        contract = published.contract
        try:
            result = await self.session.call_tool(
                contract.upstream,
                params.arguments or {},
                input_responses=params.input_responses,
                request_state=params.request_state,
                allow_input_required=True,
            )
        except MCPError as exc:
            if exc.code not in (types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT):
                message = f"the upstream server: {exc.message}"
                return error(_code_of(exc.code), message, **identity)
            return error(
                ErrorCode.SERVICE_UNAVAILABLE,
                f"the upstream server {self.upstream} did not answer: {exc.message}",
                # An action may have run: only a read is safe to send again.
                retryable=contract.mcplet_type == "read",
                **identity,
            )
        if isinstance(result, types.InputRequiredResult):
            if rounds:
                # The upstream's own round, passed on as it came (less its `_meta`, which
                # names the upstream); the client's retry comes back here and goes upstream.
                return types.InputRequiredResult(
                    input_requests=result.input_requests, request_state=result.request_state
                )
            return error(
                ErrorCode.UNKNOWN_ERROR,
                "the upstream server needs input from the user, which a handshake-era (2025) "
                "session cannot carry: connect with MCP 2026-07-28 to answer it",
                **identity,
            )
        text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
        if result.is_error:
            invalid = INVALID_ARGUMENTS.match(text.strip())
            return error(
                ErrorCode.VALIDATION_ERROR if invalid else ErrorCode.UNKNOWN_ERROR,
                f"the upstream server answered with an error: {text or 'no message'}",
                **identity,
            )
        value = _result_value(result, text)
        if published.result is not None:
            problem = next(iter(published.result.iter_errors(value)), None)
            if problem is not None:
                logger.error("%s: the result breaks its schema: %s", contract.name, problem)
                return error(
                    ErrorCode.UNKNOWN_ERROR,
                    "the upstream's result does not match the configured result schema",
                    **identity,
                )
        return ok(value, **identity)

    async def _list_resources(
        self, ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(uri=uri, name=uri, mime_type="application/json")
                for uri in self._schemas
            ]
        )

    async def _read_resource(
        self, ctx: ServerRequestContext, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        text = self._schemas.get(str(params.uri))
        if text is None:
            raise MCPError(code=RESOURCE_NOT_FOUND, message="Resource not found")
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(uri=params.uri, mime_type="application/json", text=text)
            ]
        )


def first_cause(error: BaseException) -> BaseException:
    """The exception inside task groups' nested groups."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def _modern(session: ClientSession) -> bool:
    return session.protocol_version in MODERN_PROTOCOL_VERSIONS


def _validator(schema: dict[str, Any] | None) -> Any:
    return validator_for(schema, Draft202012Validator)(schema) if schema else None


def _code_of(mcp_code: int) -> str:
    """The §9.1 code of a JSON-RPC error from the upstream."""
    if mcp_code == types.INVALID_PARAMS:
        return ErrorCode.VALIDATION_ERROR
    if mcp_code in (types.METHOD_NOT_FOUND, RESOURCE_NOT_FOUND):
        return ErrorCode.NOT_FOUND
    return ErrorCode.UNKNOWN_ERROR


def _result_value(result: types.CallToolResult, text: str) -> Any:
    """The upstream's structured content, or else its content: text alone as `{"text": ...}`,
    anything else (images, resources) as the MCP content blocks."""
    if result.structured_content is not None:
        return result.structured_content
    if all(isinstance(c, types.TextContent) for c in result.content):
        return {"text": text}
    return {"content": [c.model_dump(mode="json", by_alias=True) for c in result.content]}


def log_to_stderr() -> None:
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="mcplet-adapter: %(levelname)s %(message)s"
    )
