"""Client sessions to registered MCP servers (stdio or streamable HTTP), via the `mcp` SDK."""

import functools
import ssl
import sys
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

import anyio
import httpx2
from django.conf import settings
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

# `python` in a stdio command means the host's own interpreter, so `python -m mcplets...` runs
# with the host's packages whatever the PATH of the process that launched the host.
PYTHON_ALIASES = {"python", "python3"}


@dataclass(frozen=True)
class ServerConfig:
    """What it takes to reach one server: a plain snapshot, safe to hand to async code."""

    id: int
    name: str
    transport: str
    command: str = ""
    args: tuple = ()
    env: tuple = field(default=(), repr=False)
    url: str = ""
    headers: tuple = field(default=(), repr=False)

    @classmethod
    def of(cls, server):
        return cls(
            id=server.pk,
            name=server.name,
            transport=server.transport,
            command=server.command,
            args=tuple(server.args or ()),
            env=tuple(sorted((server.env or {}).items())),
            url=server.url,
            headers=tuple(sorted((server.headers or {}).items())),
        )


class ServerUnreachable(Exception):
    """The server could not be reached or did not answer; the message says why."""


def first_leaf(exc):
    """The first real exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe(exc):
    """A one-line reason from whatever anyio, httpx or the SDK raised (groups included)."""
    exc = first_leaf(exc)
    if isinstance(exc, ServerUnreachable):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    text = str(exc) or repr(exc)
    return f"{type(exc).__name__}: {text}"


@functools.cache
def _ssl_context():
    # Loading the CA bundle costs ~26 ms: once per process, not once per session.
    return ssl.create_default_context()


@asynccontextmanager
async def open_session(config, *, timeout=30.0, message_handler=None):
    """An initialized `ClientSession` to the server; ServerUnreachable if it cannot be opened."""
    opened = False
    try:
        async with AsyncExitStack() as stack:
            if config.transport == "stdio":
                command = sys.executable if config.command in PYTHON_ALIASES else config.command
                params = StdioServerParameters(
                    command=command,
                    args=list(config.args),
                    env=dict(config.env) or None,
                    cwd=settings.BASE_DIR,
                )
                read, write = await stack.enter_async_context(stdio_client(params))
            else:
                client = httpx2.AsyncClient(
                    headers=dict(config.headers),
                    timeout=httpx2.Timeout(timeout, read=max(timeout, 300.0)),
                    verify=_ssl_context(),
                )
                await stack.enter_async_context(client)
                read, write = await stack.enter_async_context(
                    streamable_http_client(config.url, http_client=client)
                )
            session = await stack.enter_async_context(
                ClientSession(
                    read, write, read_timeout_seconds=timeout, message_handler=message_handler
                )
            )
            with anyio.fail_after(timeout):
                await session.initialize()
            opened = True
            yield session
    except Exception as exc:
        # Transport failures surface when its task group exits, so this wraps the whole block.
        # Once the session was handed out, the caller's own error passes through, out of the
        # exception group the transport's task group put it in.
        if opened:
            raise first_leaf(exc)  # noqa: B904 (the group stays attached as __context__)
        raise ServerUnreachable(f"{config.name}: {describe(exc)}") from exc
