import pytest

from mcplets.examples.programmable import serve_http, stdio_params, write_spec
from pools.models import McpServer, Pool
from tests.conftest import Calls


def tool(name, mcplet_type="read", visibility=("model",), **meta):
    """A tool entry for the programmable server's spec; `meta` goes into `_meta` verbatim."""
    entry_meta = {"mcpletType": mcplet_type, "visibility": visibility and list(visibility), **meta}
    entry_meta = {k: v for k, v in entry_meta.items() if v is not None}
    return {"name": name, "description": f"{name} tool", "_meta": entry_meta}


class SpecServer:
    """A programmable MCP server's spec file and an McpServer row pointing at it; `calls` is
    what the server received."""

    def __init__(self, path, name):
        self.path, self.name = path, name
        self.calls = Calls(path.with_suffix(".calls.jsonl"))

    def write(self, tools, resources=None, list_ttl_ms=0):
        write_spec(self.path, tools, resources, list_ttl_ms)

    def stdio(self, page_size=0, protocols="both"):
        command, args = stdio_params(
            self.path, page_size=page_size, calls_log=self.calls.path, protocols=protocols
        )
        return McpServer.objects.create(
            name=self.name, transport="stdio", command=command, args=args
        )


@pytest.fixture
def spec(tmp_path):
    made = []

    def make(tools, name="crm", resources=None):
        server = SpecServer(tmp_path / f"{name}.json", name)
        server.write(tools, resources)
        made.append(server)
        return server

    return make


@pytest.fixture
def http_server():
    """A factory (spec, page_size, protocols) → McpServer of a programmable server over
    streamable HTTP."""
    stack = []

    def start(server_spec, page_size=0, protocols="both"):
        context = serve_http(
            server_spec.path,
            page_size=page_size,
            calls_log=server_spec.calls.path,
            protocols=protocols,
        )
        url = context.__enter__()
        stack.append(context)
        return McpServer.objects.create(name=server_spec.name, transport="http", url=url)

    yield start
    for context in reversed(stack):
        context.__exit__(None, None, None)


@pytest.fixture
def pools():
    return {name: Pool.objects.create(name=name) for name in ("info-pool", "media-pool")}
