"""Serving a low-level MCP server, and running one in a child process (the kit's examples, the
adapter and their tests)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from mcp.server import Server

SOURCE_ROOT = Path(__file__).resolve().parents[1]


async def serve(server: Server, transport: str, host: str, port: int) -> None:
    """Serve `server` over stdio or streamable HTTP until the process ends."""
    if transport == "stdio":
        from mcp.server.stdio import stdio_server

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
