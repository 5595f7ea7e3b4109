import json

import pytest
import yaml

from agents.models import Agent
from mcplet_host import gateway
from mcplets.examples.programmable import stdio_params, write_spec
from pools.discovery import discover
from pools.models import McpServer, Pool


@pytest.fixture(autouse=True)
def no_running_host(settings, tmp_path_factory, monkeypatch):
    """No host runs for a test, unless it starts one (`runhost`) or plays it (`host_process`):
    links use PASSKEY_ORIGIN, and commands run their calls in their own process."""
    from passkey import links

    settings.MCPLET_HOST_FILE = tmp_path_factory.mktemp("host") / "host.json"
    monkeypatch.setattr(links, "_serving_pages", False)


@pytest.fixture
def host_process(monkeypatch):
    """This test process plays the host's web process: it serves the loopback pages of the
    calls it holds (localhost mode)."""
    from passkey import links

    monkeypatch.setattr(links, "_serving_pages", True)


@pytest.fixture
def script(tmp_path, settings):
    """Write a scripted-model script; returns the model string that plays it."""
    settings.MCPLET_SCRIPT_DIRS = [str(tmp_path)]

    def write(agents, name="test"):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({"agents": agents}))
        return f"scripted/{name}"

    return write


@pytest.fixture
def eager():
    """Run the bus and the continuations in this thread, at each commit (use with
    django_db(transaction=True)). Workers are exercised by the tests marked `services`."""
    from mcplet_host.celery import app

    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    try:
        yield
    finally:
        app.conf.task_always_eager = app.conf.task_eager_propagates = False


@pytest.fixture
def staff_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("operator", "op@example.org", "pw-operator-1")
    client.force_login(user)
    return client


STRICT = {"required": "passkey", "enforcement": "strict", "promptMessage": "Approve the e-mail"}
HOST_ONLY = {"required": "passkey", "enforcement": "host-only", "promptMessage": "Approve the plan"}
FILTER = {"type": "object", "properties": {"filter": {"type": "string"}}, "required": ["filter"]}
URL = {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}
EMAIL = {
    "type": "object",
    "properties": {
        "to": {"type": "array", "items": {"type": "string"}},
        "body": {"type": "string"},
    },
    "required": ["to", "body"],
}
STATS_SCHEMA = {
    "type": "object",
    "properties": {"visits": {"type": "integer"}},
    "required": ["visits"],
}


def entry(name, mcplet_type="read", visibility=("model",), schema=None, **meta):
    return {
        "name": name,
        "description": f"{name} (test)",
        "inputSchema": schema or {"type": "object", "properties": {}},
        "_meta": {"mcpletType": mcplet_type, "visibility": list(visibility), **meta},
    }


def reference_tools():
    stats = entry(
        "read_site_stats",
        pool="media-pool",
        mcpletToolResultSchemaUri="mcplet://tool-result-schema/read_site_stats",
    )
    stats |= {"resultSchema": STATS_SCHEMA, "result": {"visits": 1200}}
    broken = entry(
        "broken_stats", mcpletToolResultSchemaUri="mcplet://tool-result-schema/broken_stats"
    )
    broken |= {"resultSchema": STATS_SCHEMA, "result": {"visits": "many"}}
    return [
        entry("query_crm", schema=FILTER),
        entry("fetch_web_content", pool="info-pool", schema=URL),
        stats,
        broken,
        entry("send_email", "action", ("app",), schema=EMAIL, pool="media-pool", auth=STRICT),
        entry("approve_plan", "prepare", ("model", "app"), auth=HOST_ONLY),
        entry("app_only_lookup", "read", ("app",)),
    ]


class Calls:
    """What the MCP server actually received (its calls log)."""

    def __init__(self, path):
        self.path = path

    def __call__(self, name=None):
        if not self.path.exists():
            return []
        calls = [json.loads(line) for line in self.path.read_text().splitlines()]
        return [c for c in calls if name is None or c["name"] == name]


@pytest.fixture
def calls(tmp_path):
    return Calls(tmp_path / "calls.jsonl")


@pytest.fixture
def reference_server(tmp_path, calls):
    """How the registry reaches the reference tools: a stdio server of this test. A module may
    override it with one server for all its tests (its fields for McpServer)."""
    spec = tmp_path / "tools.json"
    write_spec(spec, reference_tools())
    command, args = stdio_params(spec, calls_log=calls.path)
    return {"transport": "stdio", "command": command, "args": args}


@pytest.fixture
def registry(reference_server):
    """The reference tools on one server, discovered, with the plan's pools and agents."""
    return make_registry(reference_server)


def make_registry(reference_server):
    """The `registry` fixture's set-up (also bench/load.py's)."""
    info = Pool.objects.create(name="info-pool", rate_limit_per_minute=120)
    media = Pool.objects.create(name="media-pool", rate_limit_per_minute=60)
    server = McpServer.objects.create(name="reference", **reference_server)
    discover(server)
    agents = {
        "info": Agent.objects.create(agent_id="info-gathering-agent", display_name="Info"),
        "planning": Agent.objects.create(agent_id="planning-agent", display_name="Planning"),
        "dispatch": Agent.objects.create(agent_id="dispatch-agent", display_name="Dispatch"),
        "partner": Agent.objects.create(
            agent_id="partner-bot", display_name="Partner", kind="external"
        ),
    }
    agents["info"].accessible_pools.set([info])
    agents["dispatch"].accessible_pools.set([media])
    return {"server": server, "info-pool": info, "media-pool": media, **agents}


@pytest.fixture
def slow_tool(tmp_path, calls, settings, registry):
    """An action on its own server that answers after 2 s, with the host waiting 1 s (once the
    session is open: launching the server may take longer than that on a busy machine)."""
    spec = tmp_path / "slow.json"
    write_spec(spec, [{**entry("book_table", "action", ("app",)), "sleep": 2}, entry("ping")])
    command, args = stdio_params(spec, calls_log=calls.path)
    discover(McpServer.objects.create(name="slow", transport="stdio", command=command, args=args))
    assert gateway.call_tool(registry["planning"], "ping", {}).status == "executed"
    settings.MCPLET_TOOL_TIMEOUT = 1
    return "book_table"


@pytest.fixture
def director(registry):
    """A Director targeting the information agent, no schedule."""
    director = Agent.objects.create(
        agent_id="director",
        display_name="Director",
        kind=Agent.Kind.DIRECTOR,
        prompt_template="Plan for {{ tomorrow|date:'Y-m-d' }}. Targets: {{ targets|join:', ' }}",
        backoff_seconds=0,
        lock_timeout=30,
    )
    director.targets.add(registry["info"])
    return director
