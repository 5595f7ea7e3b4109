"""The held calls' tests: a 2026-07-28 server that asks for input (`bistro`), its rounds, and
the approvers' fixtures."""

import contextlib

import pytest

from agents.models import Agent
from mcplet_host import gateway
from mcplet_host.authority import Authority
from mcplets.examples.programmable import serve_http, stdio_params, write_spec
from pools.discovery import discover
from pools.models import McpServer, Pool
from tests.conftest import entry
from tests.passkey.conftest import (  # noqa: F401
    approver,
    approver_client,
    authenticator,
    passkey_settings,
)

AUTHORITY = Authority("partner-bot", ("director",))
SIGN_IN = {
    "login": {
        "method": "elicitation/create",
        "params": {
            "mode": "url",
            "message": "Sign in to the bistro's booking system",
            "url": "https://book.bistro.example/sign-in?session=7",
            "elicitationId": "e-7",
        },
    }
}
TABLE = {
    "type": "object",
    "properties": {
        "seating": {"type": "string", "enum": ["terrace", "inside"]},
        "guests": {"type": "integer", "minimum": 1, "maximum": 12},
    },
    "required": ["seating", "guests"],
}
WHICH_TABLE = {
    "table": {
        "method": "elicitation/create",
        "params": {"mode": "form", "message": "Which table?", "requestedSchema": TABLE},
    }
}
SAMPLING = {
    "llm": {
        "method": "sampling/createMessage",
        "params": {"messages": [], "maxTokens": 10},
    }
}
ARGUMENTS = {"day": "friday"}


@pytest.fixture
def bistro(tmp_path, calls):
    """A 2026-07-28-only server (stdio, or streamable HTTP: a process that outlives the host's)
    whose `book_table` asks `rounds` first; returns the agent that may call it (for a partner,
    through the director)."""
    with contextlib.ExitStack() as stack:

        def start(*rounds, transport="stdio", mcplet_type="read", **meta):
            tool = entry("book_table", mcplet_type, pool="bistro-pool", **meta)
            tool |= {"inputRequired": list(rounds)}
            spec = write_spec(tmp_path / "tools.json", [tool])
            if transport == "http":
                url = stack.enter_context(serve_http(spec, calls_log=calls.path, protocols="2026"))
                where = {"transport": "http", "url": url}
            else:
                command, args = stdio_params(spec, calls_log=calls.path, protocols="2026")
                where = {"transport": "stdio", "command": command, "args": args}
            server = McpServer.objects.create(name="bistro", **where)
            pool = Pool.objects.create(name="bistro-pool")
            discover(server)
            server.refresh_from_db()
            assert server.protocol_version == "2026-07-28"
            partner = Agent.objects.create(
                agent_id="partner-bot", display_name="P", kind="external"
            )
            partner.accessible_pools.set([pool])
            agent = Agent.objects.create(agent_id="planning-agent", display_name="Planning")
            agent.accessible_pools.set([pool])
            return agent

        yield start


def book(agent, ref="run:call-1", trace="ctx-round", day="friday"):
    return gateway.call_tool(
        agent, "book_table", {"day": day}, trace=trace, authority=AUTHORITY, continuation_ref=ref
    )
