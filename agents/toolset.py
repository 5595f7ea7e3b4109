"""What each LLM turn of a run is offered (MGP §16.3's levels), and the two discovery
meta-tools the host answers itself: `mgp.tools.discover` (§16.5) and `mgp.tools.request`
(§16.6). Both search only `gateway.visible_to` — what this agent, acting for this run's
authority, may call right now — so no answer names a tool outside the grants. A tool found is
recorded on the run (`AgentRun.discovered_tools`): offered for the rest of the run, a resumed
one included, and still checked by the gateway at every call."""

import math

import jsonschema
from django.conf import settings
from django.utils.functional import cached_property

from agents import llm
from agents.models import Agent
from mcplet_host import audit, gateway, storable, tracing
from mcplet_host.gateway.envelopes import error_envelope
from mcplets import ErrorCode
from toolindex import search

DISCOVER, REQUEST = "mgp.tools.discover", "mgp.tools.request"
# The names the model sees: OpenAI's and Anthropic's function names allow no dots. A call by
# the spec's own name is answered the same.
LLM_NAMES = {DISCOVER: "mgp_tools_discover", REQUEST: "mgp_tools_request"}
META_TOOLS = {**{v: k for k, v in LLM_NAMES.items()}, DISCOVER: DISCOVER, REQUEST: REQUEST}
MAX_RESULTS = 20
# A requested capability is met by a tool this relevant to it (a share of the best score).
MIN_REQUEST_RELEVANCE = 0.2
RISK_LEVELS = list(search.RISK_ORDER)

DISCOVER_INPUT = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "maxLength": 1000,
            "description": "Natural language description of needed capability",
        },
        "strategy": {"type": "string", "enum": list(search.STRATEGIES), "default": "keyword"},
        "max_results": {
            "type": "number",
            "default": 5,
            "minimum": 1,
            "maximum": MAX_RESULTS,
            "description": f"at most {MAX_RESULTS}",
        },
        "filter": {
            "type": "object",
            "properties": {
                "categories": {"type": "array", "items": {"type": "string"}, "maxItems": 50},
                "risk_level_max": {"type": "string", "enum": RISK_LEVELS},
                "status": {
                    "type": "string",
                    "enum": ["connected", "all"],
                    "description": "either way, only the tools this agent may call now",
                },
            },
        },
    },
    "required": ["query"],
}
REQUEST_INPUT = {
    "type": "object",
    "properties": {
        "reason": {"type": "string", "enum": ["capability_gap", "performance", "preference"]},
        "context": {"type": "string", "maxLength": 2000, "description": "Why the tool is needed"},
        "requirements": {
            "type": "object",
            "properties": {
                "capabilities": {
                    "type": "array",
                    "items": {"type": "string", "maxLength": 500},
                    "maxItems": 20,
                },
                "input_types": {"type": "array", "items": {"type": "string"}},
                "output_types": {"type": "array", "items": {"type": "string"}},
                "preferred_risk_level": {"type": "string", "enum": RISK_LEVELS},
            },
        },
        "task_trace_id": {"type": "string", "description": "Trace ID for audit"},
    },
    "required": ["reason", "context", "requirements"],
}
DESCRIPTIONS = {
    DISCOVER: "Search the tools you may use for one that does what you need, by describing "
    "it (any language). Found tools come with their full input schema and can be called "
    "right away; call this first whenever no tool you have fits.",
    REQUEST: "Ask for tools that fill a capability gap in the task at hand: name the "
    "capabilities you lack; the tools that provide them are loaded for you.",
}


class Toolset:
    """The tools one run offers its model, at the agent's level (resolved once per turn)."""

    def __init__(self, run):
        self.run, self.agent = run, run.agent
        self.visible = gateway.visible_to(self.agent, run.authority)

    @cached_property
    def mode(self):
        return level(self.agent, self.visible)

    @property
    def discovers(self):
        return self.mode != Agent.ToolMode.ALL

    def loaded(self):
        """The tool names in context besides the meta-tools: found ones, and pinned (L3)."""
        names = list(self.run.discovered_tools)
        if self.mode == Agent.ToolMode.HYBRID:
            names += [n for n in self.agent.pinned_tools if n not in names]
        return names

    def offered(self):
        """The names the gateway lets this run's model call (None: every visible one)."""
        return frozenset(self.loaded()) if self.discovers else None

    def specs(self):
        """The tool list of the next LLM turn, in the OpenAI format litellm takes."""
        if not self.discovers:
            return [spec(t) for t in self.visible.select_related("server").order_by("name")]
        tools = self.visible.filter(name__in=self.loaded()).order_by("name")
        return meta_specs() + [spec(t) for t in tools if t.name not in META_TOOLS]

    def answers(self, name):
        return self.discovers and name in META_TOOLS

    def call(self, name, arguments):
        """A meta-tool's answer (its MGP output, or an MCPlet error envelope)."""
        name = META_TOOLS[name]
        values = arguments.values() if isinstance(arguments, dict) else ()
        if any(isinstance(v, float) and math.isnan(v) for v in values):  # within every bound
            message = f"Invalid arguments for {name}: NaN is not a number."
            return error_envelope(ErrorCode.VALIDATION_ERROR, message, name)
        try:
            jsonschema.validate(arguments, _input(name))
        except jsonschema.ValidationError as exc:
            message = f"Invalid arguments for {name}: {storable.printable(exc.message)}"
            return error_envelope(ErrorCode.VALIDATION_ERROR, message, name)
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
        with tracing.span(f"execute_tool {name}", attributes=attributes):
            return self._discover(arguments) if name == DISCOVER else self._request(arguments)

    # --- the meta-tools ------------------------------------------------------------------------

    def _discover(self, arguments):
        wanted = arguments.get("filter") or {}
        found = search.search(
            self.visible,
            arguments["query"],
            arguments.get("strategy", "keyword"),
            min(int(arguments.get("max_results", 5)), MAX_RESULTS),
            [c for c in wanted.get("categories") or () if not storable.problem(c)],
            wanted.get("risk_level_max", ""),
        )
        self._load([m for m, _ in found.tools])
        output = {
            "tools": [_described(m, relevance_score=score) for m, score in found.tools],
            "total_available": found.total_available,
            "search_strategy": found.search_strategy,
            "query_time_ms": found.query_time_ms,
        }
        if found.fallback_strategy:
            output["fallback_strategy"] = found.fallback_strategy
        self._record(DISCOVER, arguments["query"], found.search_strategy, found.tools)
        return output

    def _request(self, arguments):
        """§16.6: each capability asked for is met by the best tool for it, if relevant
        enough; never `creating` (the host makes no tools) nor `pending_approval` (what a
        call needs is decided when it is called)."""
        requirements = arguments["requirements"]
        wanted = requirements.get("capabilities") or [arguments["context"]]
        risk = requirements.get("preferred_risk_level", "")
        loaded, unavailable = [], []
        for capability in wanted:
            best = search.search(self.visible, capability, limit=1, risk_level_max=risk).tools
            if best and best[0][1] >= MIN_REQUEST_RELEVANCE:
                if best[0][0] not in loaded:
                    loaded.append(best[0][0])
            else:
                unavailable.append(capability)
        added = self._load(loaded)
        status = "unavailable" if not loaded else "partial" if unavailable else "fulfilled"
        self._record(REQUEST, arguments["context"], "keyword", [(m, None) for m in loaded])
        return {
            "status": status,
            "tools_loaded": [_described(m) for m in loaded],
            "tools_unavailable": unavailable,
            "session_tools_count": len(self.loaded()),
            "context_tokens_added": llm.schema_tokens([spec(m) for m in added]),
        }

    def _load(self, mcplets):
        """Found tools join the run's context (once each); returns the newly added ones."""
        added = [m for m in mcplets if m.name not in self.run.discovered_tools]
        if added:
            self.run.discovered_tools = [*self.run.discovered_tools, *(m.name for m in added)]
            self.run.keep("discovered_tools")
        return added

    def _record(self, meta_tool, query, strategy, results):
        """Each discovery is an audit event of the agent's, in the run's trace."""
        audit.record(
            f"mcplet.tools.{'discovered' if meta_tool == DISCOVER else 'requested'}",
            actor_type=audit.ActorType.AGENT,
            actor_id=self.agent.agent_id,
            target_tool=meta_tool,
            trace_id=self.run.context_id,
            details={
                **self.run.authority.audit_details(),
                "query": query[:500],
                "strategy": strategy,
                "results": len(results),
                "tools": [m.name for m, _ in results],
            },
        )


def level(agent, visible):
    """The agent's tool mode, the automatic one resolved against what it may see (`visible`)."""
    if agent.tool_mode != Agent.ToolMode.AUTO:
        return agent.tool_mode
    threshold = settings.MCPLET_TOOL_DISCOVERY_THRESHOLD
    over = visible.values("pk")[: threshold + 1].count() > threshold
    return Agent.ToolMode.HYBRID if over else Agent.ToolMode.ALL


def meta_specs():
    """The two meta-tools as the model sees them."""
    return [llm.tool_spec(LLM_NAMES[n], DESCRIPTIONS[n], _input(n)) for n in LLM_NAMES]


def _input(name):
    return DISCOVER_INPUT if name == DISCOVER else REQUEST_INPUT


def spec(mcplet):
    return llm.tool_spec(mcplet.name, mcplet.description, mcplet.input_schema)


def _described(mcplet, **extra):
    """A tool as the meta-tools return it: enough to call it at once (§16.5)."""
    return {
        "name": mcplet.name,
        "server_id": mcplet.server.name,
        "description": mcplet.description,
        **extra,
        "inputSchema": mcplet.input_schema,
        "security": {
            "risk_level": search.RISK_LEVELS.get(mcplet.mcplet_type, "moderate"),
            "permissions_required": [f"pool:{mcplet.pool_name}"] if mcplet.pool_name else [],
            "approval_required": mcplet.needs_approval,
        },
    }
