"""Serving a low-level MCP server — both MCP generations (2026-07-28 and the 2025-11-25
handshake), as the SDK does, or one of them — and running one in a child process (the kit's
examples, the adapter and their tests)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

SOURCE_ROOT = Path(__file__).resolve().parents[1]
GENERATIONS = ("both", "2025", "2026")  # what `one_generation` and `serve` take


def one_generation(server: Any, generation: str) -> None:
    """Make `server` (a low-level Server or an MCPServer) speak one MCP generation only, as a
    server built for it would: `2025` answers `server/discover` Method not found (a pre-2026
    server), `2026` refuses `initialize` with UNSUPPORTED_PROTOCOL_VERSION and its versions."""
    if generation == "both":
        return

    # Every request of either era passes the middleware on both transports.
    async def refuse_the_other(ctx: Any, call_next: Any) -> Any:
        if generation == "2025" and ctx.method == "server/discover":
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found", data=ctx.method)
        if generation == "2026" and ctx.method == "initialize":
            data = types.UnsupportedProtocolVersionErrorData(
                supported=list(MODERN_PROTOCOL_VERSIONS),
                requested=str((ctx.params or {}).get("protocolVersion")),
            )
            raise MCPError(
                code=types.UNSUPPORTED_PROTOCOL_VERSION,
                message="Unsupported protocol version",
                data=data.model_dump(mode="json"),
            )
        return await call_next(ctx)

    server.middleware.append(refuse_the_other)


async def serve(
    server: Server, transport: str, host: str, port: int, generation: str = "both"
) -> None:
    """Serve `server` over stdio or streamable HTTP until the process ends (`generation`: as
    given to `one_generation`)."""
    if transport == "stdio":
        from mcp.server.stdio import stdio_server

        if generation == "2025":
            # The dual-era stdio loop locks a connection to 2026-07-28 on its first enveloped
            # request, so after the refused discover probe the client's initialize would be
            # refused too; a pre-2026 server is the SDK's handshake-only loop.
            from mcp.server.runner import serve_loop

            async with stdio_server() as (read, write), server.lifespan(server) as state:
                options = server.create_initialization_options()
                await serve_loop(server, read, write, lifespan_state=state, init_options=options)
            return
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        return
    import uvicorn

    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def listening(command: Sequence[str], port: int, timeout: float = 20) -> Iterator[None]:
    """Run `command` in a child process for the block, entered once it listens on `port`
    (uvicorn binds only after its lifespan has started); stopped at the end, killed if need be."""
    process = subprocess.Popen(list(command), cwd=SOURCE_ROOT)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{command[-1]!r} did not start (exit code {process.poll()})"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
