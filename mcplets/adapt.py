"""Run the MCPlet adapter in front of an MCP server that is not an MCPlet (see
`mcplets.adapter`), or draft its configuration with `--suggest`.

    python -m mcplets.adapt CONFIG [--transport stdio|streamable-http] [--port N] -- COMMAND...
    python -m mcplets.adapt CONFIG --url http://127.0.0.1:9000/mcp
    python -m mcplets.adapt --suggest [-o draft.yaml] -- COMMAND...

A strict tool's assertion is verified at MCPLET_VERIFY_URL with MCPLET_VERIFY_TOKEN (set by
the host for a stdio server it launches; the upstream never sees either).

An upstream at `--url` behind OAuth is reached with the client credentials grant, as the client
MCPLET_ADAPTER_CLIENT_ID with MCPLET_ADAPTER_CLIENT_SECRET of the authorization server whose
issuer is MCPLET_ADAPTER_ISSUER, asking for MCPLET_ADAPTER_SCOPE if set (else the scopes the
upstream advertises). A stdio upstream never sees the client's id or secret.
"""

import argparse
import os
import sys
from pathlib import Path

import anyio

from mcplets.adapter.config import ConfigError, load_config
from mcplets.adapter.server import (
    Adapter,
    Upstream,
    UpstreamGone,
    first_cause,
    list_upstream_tools,
    log_to_stderr,
    upstream_session,
)
from mcplets.adapter.suggest import draft, pool_for
from mcplets.serving import serve


def parse_args(argv):
    # Everything after `--` is the upstream's command, options included.
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(
        prog="python -m mcplets.adapt", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("config", nargs="?", type=Path, help="the adapter's configuration file")
    parser.add_argument("--url", default="", help="a streamable-HTTP upstream's MCP endpoint")
    parser.add_argument("--suggest", action="store_true", help="write a draft configuration")
    parser.add_argument("-o", "--output", type=Path, help="where --suggest writes (stdout)")
    parser.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8767)
    args = parser.parse_args(argv)
    if bool(command) == bool(args.url):
        parser.error("name the upstream: `-- COMMAND...` (stdio) or `--url URL`, not both")
    if not args.suggest and args.config is None:
        parser.error("a configuration file is required (draft one with --suggest)")
    args.upstream = Upstream(command=tuple(command), url=args.url)
    return args


async def suggest(upstream, output):
    async with upstream_session(upstream) as session:
        tools = await list_upstream_tools(session)
        name = session.server_info.name if session.server_info else ""
    name = name or "upstream"
    text = draft(tools, str(upstream), server=f"{name}-mcplets", pool=pool_for(name))
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")
        print(f"Wrote a draft for {len(tools)} tools to {output}: review it.", file=sys.stderr)


def main(argv=None):
    args = parse_args(argv)
    log_to_stderr()
    if args.suggest:
        try:
            anyio.run(suggest, args.upstream, args.output)
        except* UpstreamGone as gone:
            sys.exit(f"mcplets.adapt: {first_cause(gone)}")
        return
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        sys.exit(f"mcplets.adapt: {exc}")
    stdio = args.transport == "stdio"
    try:
        adapter = Adapter(config, args.upstream, on_gone=_end_now if stdio else None)
        anyio.run(serve, adapter.server, args.transport, args.host, args.port)
    except* UpstreamGone as gone:
        sys.exit(f"mcplets.adapt: {first_cause(gone)}")


def _end_now(gone: UpstreamGone) -> None:
    print(f"mcplets.adapt: {gone}", file=sys.stderr, flush=True)
    # The SDK's stdio server reads stdin in a worker thread that nothing can cancel: it
    # would unwind only at the client's next line, and a client awaiting an answer has none.
    os._exit(1)


if __name__ == "__main__":
    main()
