import pytest

from agents.models import Agent
from mcplets.examples.programmable import stdio_params, write_spec
from pools.discovery import discover
from pools.models import McpServer, Pool
from tests.conftest import entry

CUSTOMER = {
    "type": "object",
    "properties": {"email": {"type": "string", "description": "The customer's e-mail address"}},
    "required": ["email"],
}


def described(name, description, **meta):
    return {**entry(name, **meta), "description": description}


def workspace_tools():
    """A small workspace: CRM and calendar granted to the assistant, mail not."""
    find = described(
        "find_customer", "Look up a customer record in the CRM", pool="crm-pool", schema=CUSTOMER
    )
    find["result"] = {"customer": "Hanako Sato", "tier": "gold"}
    return [
        find,
        described("list_open_deals", "List the sales opportunities still open", pool="crm-pool"),
        described(
            "list_calendar_events",
            "List the events on a calendar between two dates",
            pool="calendar-pool",
        ),
        described("check_reservations", "指定した日の予約一覧を確認します", pool="calendar-pool"),
        described("search_mailbox", "Search the e-mail messages in a mailbox", pool="mail-pool"),
        described("get_weather", "The weather forecast for a city"),
    ]


@pytest.fixture
def workspace(tmp_path, calls):
    """The workspace tools on a stdio server of this test, discovered; `rewrite` lists others."""
    pools = {
        name: Pool.objects.create(name=name) for name in ("crm-pool", "calendar-pool", "mail-pool")
    }
    spec = tmp_path / "workspace.json"
    write_spec(spec, workspace_tools())
    command, args = stdio_params(spec, calls_log=calls.path)
    server = McpServer.objects.create(
        name="workspace", transport="stdio", command=command, args=args
    )
    discover(server)
    assistant = Agent.objects.create(agent_id="assistant", display_name="Assistant")
    assistant.accessible_pools.set([pools["crm-pool"], pools["calendar-pool"]])
    mailer = Agent.objects.create(agent_id="mailer", display_name="Mailer")
    mailer.accessible_pools.set([pools["mail-pool"]])

    def rewrite(tools):
        write_spec(spec, tools)
        discover(server)

    return {"server": server, "assistant": assistant, "mailer": mailer, "rewrite": rewrite, **pools}
