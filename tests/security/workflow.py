"""Helpers and fixtures of the attack modules that drive whole workflows: app-only
tools in granted pools, a chain of hand-offs, a partner's task entering the bus as the partner
API posts it, and the checks every attempt ends with — the MCP server's own call log says
nothing ran, and an audit event says why."""

import contextlib
from types import SimpleNamespace

import pytest

from a2a import bus, messages
from agents.models import Agent, AgentRun
from mcplet_host.authority import Authority
from mcplet_host.models import AuditEvent
from mcplets.examples.programmable import serve_http, write_spec
from tests.conftest import HOST_ONLY, Calls, entry, reference_tools

PARTNER = "partner-bot"

# App-only tools in the dispatch agent's pool, one of each kind an LLM might name.
APP_TOOLS = [
    entry("export_bookings", "read", ("app",), pool="media-pool"),
    entry("prepare_coupon", "prepare", ("app",), pool="media-pool"),
    entry("post_sns", "action", ("app",), pool="media-pool", auth=HOST_ONLY),
]
APP_ONLY = ["app_only_lookup", "export_bookings", "prepare_coupon", "post_sns", "send_email"]

# The agents a partner's task reaches: info-gathering-agent, then one per hand-off.
CHAIN = ["info-gathering-agent", "planning-agent", "dispatch-agent", "report-agent"]


@contextlib.contextmanager
def one_server(directory):
    """The reference tools and APP_TOOLS on one streamable-HTTP server for a whole module: an
    attempt costs no process launch. Yields (its McpServer fields, its call log)."""
    spec, calls = directory / "tools.json", Calls(directory / "calls.jsonl")
    write_spec(spec, reference_tools() + APP_TOOLS)
    with serve_http(spec, calls_log=calls.path) as url:
        yield {"transport": "http", "url": url}, calls


def wire(registry, script, turns, hops):
    """Hand-offs info → planning → dispatch → report (as many as `hops`), every agent holding
    both pools; the agent at the end plays `turns`, the ones before answer at once."""
    agents = [registry["info"], registry["planning"], registry["dispatch"]]
    agents.append(Agent.objects.create(agent_id="report-agent", display_name="Report"))
    agents = agents[: hops + 1]
    model = script(
        {
            **{a.agent_id: [{"json": {"summary": f"from {a.agent_id}"}}] for a in agents[:-1]},
            agents[-1].agent_id: turns,
        }
    )
    for agent, after in zip(agents, [*agents[1:], None], strict=True):
        agent.model, agent.hands_off_to = model, after
        agent.save()
        agent.accessible_pools.set([registry["info-pool"], registry["media-pool"]])
    return agents[-1]


def partner_task(recipient="info-gathering-agent", parameters=None, sender=PARTNER):
    """A partner's task as the partner API posts it: its authority from the key, not the body."""
    body = messages.task_request(sender, recipient, parameters or {"store": "shinjuku"})
    return bus.post(body, Authority.of_partner(sender), external=True)


def spellings(name):
    """The name, and ways an LLM (or an injected prompt) might spell it to slip past a check."""
    confusable = name.replace("o", "\u043e", 1).replace("a", "\u0430", 1)  # Cyrillic о, а
    return {
        "exact": name,
        "upper case": name.upper(),
        "padded": f" {name}\t",
        "confusable": confusable,
        "zero-width": name[:3] + "\u200b" + name[3:],
    }


def run_of(agent_id):
    return AgentRun.objects.get(agent__agent_id=agent_id)


def blocked(tool):
    """The gateway's refusal of `tool` (exactly one)."""
    (event,) = AuditEvent.objects.filter(event_type="TOOL_BLOCKED", target_tool=tool)
    return event


def executed(tool):
    return AuditEvent.objects.filter(event_type="TOOL_EXECUTED", target_tool=tool).exists()


# Fixtures for a module's tests: one server for the module, the reference registry's
# (tests/conftest.py) `reference_server` and `calls` pointed at it.


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    with one_server(tmp_path_factory.mktemp("mcp")) as server:
        yield server


@pytest.fixture(scope="module")
def mcp(shared):
    """The harness's server (`attempts` watches its log) is the module's shared one."""
    config, calls = shared
    return SimpleNamespace(url=config["url"], calls=calls)


@pytest.fixture
def reference_server(shared):
    return shared[0]


@pytest.fixture
def calls(shared):
    shared[1].path.write_text("")  # this attempt's calls only
    return shared[1]


@pytest.fixture
def dispatch(registry, director):
    """The dispatch agent (media-pool), which partners may call; the partner holds media-pool
    too, so only the rule under attack stands between a proposal and its execution."""
    partner = registry["partner"]
    partner.callable_agents.set([registry["dispatch"]])
    partner.accessible_pools.set([registry["media-pool"]])
    return registry["dispatch"]


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    """Run what commits inside (the bus, the continuations, eagerly) as if it had committed."""
    return lambda: django_capture_on_commit_callbacks(execute=True)
