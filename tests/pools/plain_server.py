"""A plain MCP server, like the `mcp` SDK's examples: its tools carry no MCPlet metadata, so the
host rejects every one of them. Like many servers it talks on its stderr.

    python -m tests.pools.plain_server
"""

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("plain")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


def discovered(name="plain"):
    """This server registered on the host (stdio) and discovered: a server in the warning state."""
    from pools.discovery import discover
    from pools.models import McpServer

    server = McpServer.objects.create(
        name=name, transport="stdio", command="python", args=["-m", __name__]
    )
    discover(server)
    return server


if __name__ == "__main__":
    print("plain server: listening on stdio", file=sys.stderr, flush=True)
    server.run()
