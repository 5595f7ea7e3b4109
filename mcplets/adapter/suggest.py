"""A draft configuration from an upstream's tool list, for the operator to review.

Only a tool the upstream itself marks read-only (`readOnlyHint`, and no `destructiveHint`), or
one named like a read (get/list/search...) that the upstream does not mark as writing, becomes a
`read` suggestion, visible to the model. Everything else is drafted as what is safest: an
`action` only host-controlled paths may call (`visibility: [app]`), behind a strict passkey.
Every tool is drafted in one pool named after the server: a pool-less tool would be reachable by
every agent, where the host rejects a tool whose pool it does not have, and an agent reaches a
pooled one only once granted (deny by default).
"""

from __future__ import annotations

import re
from typing import Any

import mcp_types as types
import yaml

from mcplets.adapter.config import parse_config

READ_NAMES = re.compile(
    r"^(get|list|search|read|find|describe|show|query|fetch|lookup|view|count|convert)(_|-|$)"
)
HEADER = """\
# A DRAFT written by `python -m mcplets.adapt --suggest` from {upstream}.
# Review every tool before you use it: the adapter publishes exactly what this file says.
# - Delete the tools the host should not reach (a tool that is not named is not published).
# - A read is visible to the model and must have no side effect; anything else is an action
#   behind a passkey (strict: the adapter verifies the approval before the upstream sees it).
# - Every tool is in the pool {pool}: the host rejects them until that pool exists (admin ›
#   Pools), and then only the agents granted it reach them. Move a tool to another pool, or drop
#   its `pool:` to make it reachable by every agent, only on purpose.
# - Add `arguments:` (a JSON Schema the arguments must also meet) and `promptMessage:` wording
#   your approvers understand.
"""


def suggest_tool(tool: types.Tool) -> tuple[dict[str, Any], str]:
    """The drafted contract of one upstream tool, and why."""
    hints = tool.annotations or types.ToolAnnotations()
    writes = hints.read_only_hint is False or hints.destructive_hint is True
    if hints.read_only_hint is True and hints.destructive_hint is not True:
        why = "the upstream marks it read-only (readOnlyHint)"
    elif READ_NAMES.match(tool.name) and not writes:
        why = f"its name reads like a read ({READ_NAMES.match(tool.name).group(1)}...)"
    else:
        why = (
            "the upstream marks it as writing"
            if writes
            else "nothing says it is free of side effects"
        )
        # The first sentence of the upstream's description: the approver reads this.
        summary = (tool.description or "").strip().split("\n")[0].split(". ")[0].rstrip(".")
        prompt = f"Allow {tool.name}?" + (f" ({summary})" if summary else "")
        return {
            "mcpletType": "action",
            "visibility": ["app"],
            "auth": {"required": "passkey", "enforcement": "strict", "promptMessage": prompt},
        }, f"action: {why}"
    return {"mcpletType": "read", "visibility": ["model"]}, f"read: {why}"


def pool_for(name: str) -> str:
    """A pool name the host accepts (a slug), after the server's name."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-")[:90]
    return f"{slug or 'upstream'}-pool"


def draft(
    tools: list[types.Tool], upstream: str, server: str = "mcplet-adapter", pool: str = ""
) -> str:
    """The draft configuration as YAML text, one commented block per tool, all in `pool`
    (default: one named after `server`)."""
    pool = pool or pool_for(server)
    lines = [HEADER.format(upstream=upstream, pool=pool), f"server: {server}", "tools:"]
    for tool in tools:
        contract, why = suggest_tool(tool)
        head = {"mcpletType": contract["mcpletType"], "visibility": contract["visibility"]}
        contract = head | {"pool": pool} | contract
        block = yaml.safe_dump(
            {tool.name: contract}, sort_keys=False, allow_unicode=True, default_flow_style=None
        )
        lines.append(f"  # {why}")
        lines += [f"  {line}" for line in block.splitlines()]
    text = "\n".join(lines) + "\n"
    parse_config(yaml.safe_load(text), "the draft")  # a draft the adapter would refuse is a bug
    return text
