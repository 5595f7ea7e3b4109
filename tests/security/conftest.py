"""The adversarial suite's harness (issue 14). One module per attack class; each attempt is

    with attempts.refused("what is tried"):
        ... the attack ...

which counts it for the module's class and then proves, from the MCP test server's own call
log (never from the host's word), that nothing ran — a call there is an unauthorised execution,
counted and failed — and that an audit event written during the attempt says why.

Each module shares one MCP server (`mcp`, streamable HTTP, the reference tools plus hostile
ones); each test registers it afresh (`world`), as the database is rolled back between tests."""

import contextlib
import time
from types import SimpleNamespace

import pytest
from django.db.models import Max

from a2a.models import PartnerKey
from agents.models import Agent
from mcplet_host.models import AuditEvent
from mcplets.examples.programmable import serve_http, write_spec
from pools.discovery import discover
from pools.models import McpServer, Pool
from tests.conftest import Calls, entry, reference_tools
from tests.security.plugin import TALLY

AGENTS = {
    "info": "info-gathering-agent",
    "planning": "planning-agent",
    "dispatch": "dispatch-agent",
}


def security_tools():
    """The reference tools, and tools discovery refuses: they must never run either."""
    return [
        *reference_tools(),
        entry("ghost_pool_read", pool="ghost-pool"),  # a pool this host never created
        entry("model_action_without_auth", "action", ("model",)),  # §5.3.1: rejected
        entry("renamed_tool"),
    ]


@pytest.fixture(scope="module")
def mcp(tmp_path_factory):
    """The module's MCP test server and its call log."""
    folder = tmp_path_factory.mktemp("mcp")
    spec = write_spec(folder / "tools.json", security_tools())
    calls = Calls(folder / "calls.jsonl")
    with serve_http(spec, calls_log=calls.path) as url:
        yield SimpleNamespace(url=url, calls=calls, spec=spec)


@pytest.fixture
def world(mcp):
    """The server registered and discovered, the plan's pools and agents, a partner with a key
    (its `raw_key`) that may call the information and dispatch agents and holds info-pool."""
    pools = {
        name: Pool.objects.create(name=name, rate_limit_per_minute=10_000)
        for name in ("info-pool", "media-pool")
    }
    server = McpServer.objects.create(name="reference", transport="http", url=mcp.url)
    discover(server)
    agents = {key: Agent.objects.create(agent_id=agent_id) for key, agent_id in AGENTS.items()}
    agents["info"].accessible_pools.set([pools["info-pool"]])
    agents["dispatch"].accessible_pools.set([pools["media-pool"]])
    partner = Agent.objects.create(agent_id="partner-bot", kind=Agent.Kind.EXTERNAL)
    partner.callable_agents.set([agents["info"], agents["dispatch"]])
    partner.accessible_pools.set([pools["info-pool"]])
    _, raw_key = PartnerKey.issue(partner, "security")
    return SimpleNamespace(
        server=server, pools=pools, partner=partner, raw_key=raw_key, calls=mcp.calls, **agents
    )


class Attempts:
    """The attempts of one attack class (the test module)."""

    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    @contextlib.contextmanager
    def refused(self, label, audited=True, calls=None, **event):
        """Count one attempt; after it, nothing may have reached the MCP server (or `calls`,
        another server's log), and (unless `audited` is False: a page read that runs nothing)
        an audit event matching `event` must have been written during it."""
        TALLY.attempts[self.name] += 1
        calls = calls or self.calls
        ran_before = len(calls())
        seq_before = AuditEvent.objects.aggregate(last=Max("seq"))["last"] or 0
        try:
            yield
        finally:
            ran = calls()[ran_before:]
            if ran:
                TALLY.unauthorised[self.name] += len(ran)
                raise AssertionError(f"{self.name}: {label!r} ran on the MCP server: {ran}")
        if audited:
            events = AuditEvent.objects.filter(seq__gt=seq_before, **event)
            assert events.exists(), f"{self.name}: no audit event {event} says why {label!r}"


@pytest.fixture
def attempts(request, mcp):
    name = request.module.__name__.rpartition(".")[2].removeprefix("test_").replace("_", " ")
    return Attempts(name, mcp.calls)


def rediscover(server, until, timeout=15):
    """Discover `server` until `until(report)` holds: the test server reloads a rewritten spec
    within a poll interval, so the first discovery may still see the previous tools."""
    deadline = time.monotonic() + timeout
    while True:
        report = discover(server)
        if until(report) or time.monotonic() > deadline:
            return report
        time.sleep(0.1)


class Partner:
    """A partner's HTTP client on Django's test client: `post(body)` a task, `get(path)`."""

    def __init__(self, client, raw_key):
        self.client, self.raw_key = client, raw_key
        client.raise_request_exception = False

    def headers(self, authorization=None):
        value = f"Bearer {self.raw_key}" if authorization is None else authorization
        return {"HTTP_AUTHORIZATION": value} if value else {}

    def post(self, path, body, content_type="application/json", authorization=None):
        return self.client.generic(
            "POST", path, body, content_type=content_type, **self.headers(authorization)
        )

    def put(self, path, body, content_type="application/json", authorization=None):
        return self.client.generic(
            "PUT", path, body, content_type=content_type, **self.headers(authorization)
        )

    def get(self, path, authorization=None):
        return self.client.get(path, **self.headers(authorization))


@pytest.fixture
def partner(client, world):
    return Partner(client, world.raw_key)


@pytest.fixture
def info_calls_crm(world, script, settings):
    """The information agent's model calls query_crm (pool-less: it runs for anyone), so a task
    that reaches it leaves a call in the server's log."""
    settings.MCPLET_A2A_WAIT = 10
    world.info.model = script(
        {
            "info-gathering-agent": [
                {"tool_calls": [{"name": "query_crm", "arguments": {"filter": "rain"}}]},
                {"text": "done"},
            ]
        }
    )
    world.info.save()
    return world.info


@pytest.fixture(autouse=True)
def _one_attempt_per_test(request):
    """Modules that prove "nothing ran" in each test themselves (from their own MCP server's call
    log) name their class in ATTACK_CLASS: each of their tests is one attempt of it."""
    name = getattr(request.module, "ATTACK_CLASS", None)
    if name:
        TALLY.attempts[name] += 1
