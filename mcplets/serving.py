"""Serving a low-level MCP server — both MCP generations (2026-07-28 and the 2025-11-25
handshake), as the SDK does, or one of them — with its own OpenTelemetry spans when the
standard OTEL_* variables ask for them (`traced`), and running one in a child process (the
kit's examples, the adapter and their tests)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcplets.otel import tracing_wanted

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


@contextlib.contextmanager
def traced(name: str) -> Iterator[None]:
    """For the block, the server's own spans — the MCP SDK's SERVER span of every request, such
    as `tools/call {tool}`, the child of the `_meta.traceparent` it came with — go where OTEL_*
    says (docs/tracing.md): over OTLP/HTTP (`OTEL_TRACES_EXPORTER=console`: to standard error,
    for standard output may be the stdio transport), as the service OTEL_SERVICE_NAME or else
    `name`, the last ones sent as it ends. Without OTEL_* asking for them, nothing happens."""
    if not tracing_wanted():
        yield
        return
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

        if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "console":
            exporter: Any = ConsoleSpanExporter(out=sys.stderr)
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
    except ImportError as exc:
        print(f"OTEL_* asks for traces, but {exc.name} is not installed: none", file=sys.stderr)
        yield
        return
    service = os.environ.get("OTEL_SERVICE_NAME") or name
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    stopping = _stopped_by_sigterm()
    try:
        yield
    finally:
        provider.shutdown()  # sends what is still queued
        if stopping is not None:
            signal.signal(signal.SIGTERM, stopping)


def _stopped_by_sigterm() -> Any:
    """Make SIGTERM (a supervisor's stop; uvicorn sends it on again once it has shut down)
    end the process as an exception, so that `traced` sends its last spans; an author's own
    handler stays. The handler it replaced, or None."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, stop)


async def serve(
    server: Server, transport: str, host: str, port: int, generation: str = "both"
) -> None:
    """Serve `server` over stdio or streamable HTTP until the process ends (`generation`: as
    given to `one_generation`), traced as OTEL_* says (`traced`)."""
    with traced(server.name):
        await _serve(server, transport, host, port, generation)


async def _serve(server: Server, transport: str, host: str, port: int, generation: str) -> None:
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
