"""Rejected, evicted and renamed tools, and near-miss names of routable ones: case,
whitespace, invisible characters, Unicode confusables, path and punctuation tricks, NUL. The
caller holds every pool, so only the name stands in the way."""

import pytest

from mcplet_host import gateway
from mcplets.examples.programmable import write_spec
from tests.security.conftest import rediscover, security_tools

pytestmark = pytest.mark.django_db

TOOLS = {  # a routable tool → (its arguments, its surface)
    "query_crm": ({"filter": "x"}, "model"),
    "read_site_stats": ({}, "model"),
    "send_email": ({"to": ["a@example.org"], "body": "hi"}, "app"),
    "app_only_lookup": ({}, "app"),
}
CONFUSABLES = {
    "e": "\u0435",
    "o": "\u043e",
    "a": "\u0430",
    "c": "\u0441",
    "p": "\u0440",
    "i": "\u0456",
}


def variants(name):
    """Names a careless resolver might take for `name`."""
    found = [
        name.upper(),
        name.title(),
        f" {name}",
        f"{name} ",
        f"\t{name}",
        f"{name}\n",
        f"{name}\x00",
        f"{name}\u200b",
        f"\u200b{name}",
        f"{name}\u00ad",
        name.replace("_", "-"),
        name.replace("_", ""),
        f"../{name}",
        f"{name}/",
        f"reference.{name}",
        f"reference/{name}",
        chr(ord(name[0]) - ord("a") + 0xFF41) + name[1:],  # full-width first letter
    ]
    for latin, lookalike in CONFUSABLES.items():
        if latin in name:
            found.append(name.replace(latin, lookalike, 1))
    return [v for v in dict.fromkeys(found) if v != name]


@pytest.fixture
def everything(world):
    world.dispatch.accessible_pools.add(*world.pools.values())
    return world.dispatch


def test_near_miss_names_are_not_routed(everything, attempts):
    for tool, (arguments, surface) in TOOLS.items():
        for name in variants(tool):
            with attempts.refused(f"{name!r} for {tool}", event_type="TOOL_BLOCKED"):
                outcome = gateway.call_tool(everything, name, arguments, surface)
                assert outcome.envelope["error"]["code"] in ("NOT_FOUND", "VALIDATION_ERROR")


def test_rejected_tools_are_not_routed(everything, attempts):
    for name in ("model_action_without_auth", "ghost_pool_read"):
        for surface in ("model", "app"):
            with attempts.refused(f"rejected {name} on {surface}", details__rule="routable"):
                assert gateway.call_tool(everything, name, {}, surface).status == "refused"


def test_evicted_and_renamed_tools_are_not_routed(world, everything, attempts, mcp):
    renamed = [
        {**tool, "name": "renamed_tool_v2"} if tool["name"] == "renamed_tool" else tool
        for tool in security_tools()
        if tool["name"] != "query_crm"  # removed from the server: evicted
    ]
    write_spec(mcp.spec, renamed)
    try:
        rediscover(world.server, lambda report: report.evicted == 2)
        for name in ("query_crm", "renamed_tool", *variants("renamed_tool")):
            with attempts.refused(f"evicted {name!r}", event_type="TOOL_BLOCKED"):
                assert gateway.call_tool(everything, name, {"filter": "x"}).status == "refused"
    finally:
        write_spec(mcp.spec, security_tools())
        rediscover(world.server, lambda report: report.evicted == 0)
