"""The adapter's configuration: which upstream tools it publishes, each with the MCPlet contract
the operator declares for it (the code-first registration of spec §5.1, written as a file).

    server: filesystem             # the adapter's MCP server name (optional)
    tools:
      read_text_file:              # the name the host sees
        mcpletType: read
        visibility: [model]
        pool: files-pool
      save_note:
        upstream: write_file       # the upstream tool's name, when it differs
        mcpletType: action
        visibility: [app]
        auth: {required: passkey, enforcement: strict, promptMessage: Write this file?}
        description: Write a note into the shared folder   # default: the upstream's
        arguments:                 # a JSON Schema the arguments must also satisfy
          properties: {path: {pattern: "^/srv/notes/"}}
        resultSchema: {...}        # a JSON Schema of the result, served as in §9.3/§9.4

Tools the file does not name are not published: deny by default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from jsonschema.exceptions import SchemaError
from jsonschema.validators import Draft202012Validator, validator_for

from mcplets.registration import MCPletRegistrationError, tool_meta

TOOL_KEYS = {
    "upstream",
    "mcpletType",
    "visibility",
    "pool",
    "auth",
    "title",
    "description",
    "arguments",
    "resultSchema",
}
REQUIRED_KEYS = {"mcpletType", "visibility"}


class ConfigError(ValueError):
    """A configuration the adapter refuses to start with; the message names the tool and key."""


@dataclass(frozen=True)
class ToolContract:
    """One published tool: its names and the contract the operator declared."""

    name: str
    upstream: str
    mcplet_type: str
    visibility: list[str]
    pool: str | None = None
    auth: dict[str, Any] | None = None
    title: str | None = None
    description: str | None = None
    arguments: dict[str, Any] | None = None
    result_schema: dict[str, Any] | None = None

    @property
    def strict(self) -> bool:
        return self.auth is not None and self.auth.get("enforcement") == "strict"

    def meta(self, description: str) -> dict[str, Any]:
        """The `_meta` published for the tool, checked as the kit checks a registration."""
        return tool_meta(self.visibility, self.mcplet_type, description, self.pool, self.auth, None)


@dataclass(frozen=True)
class AdapterConfig:
    server: str
    tools: dict[str, ToolContract]  # by published name


def load_config(path: str | Path) -> AdapterConfig:
    """Read and check a configuration file (YAML or JSON); raises ConfigError."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from None
    return parse_config(data, str(path))


def parse_config(data: Any, source: str = "the configuration") -> AdapterConfig:
    if not isinstance(data, Mapping) or not isinstance(data.get("tools"), Mapping):
        raise ConfigError(f"{source}: expected a mapping with a 'tools' mapping")
    unknown = set(data) - {"server", "tools"}
    if unknown:
        raise ConfigError(f"{source}: unknown keys {sorted(unknown)}")
    server = data.get("server", "mcplet-adapter")
    if not isinstance(server, str) or not server:
        raise ConfigError(f"{source}: 'server' is a name")
    tools = {}
    for name, entry in data["tools"].items():
        try:
            tools[str(name)] = _contract(str(name), entry)
        except (ConfigError, MCPletRegistrationError) as exc:
            raise ConfigError(f"{source}: tool {name!r}: {exc}") from None
    if not tools:
        raise ConfigError(f"{source}: names no tool, so the adapter would publish nothing")
    return AdapterConfig(server=server, tools=tools)


def _contract(name: str, entry: Any) -> ToolContract:
    if not isinstance(entry, Mapping):
        raise ConfigError("expected a mapping of its contract")
    unknown = set(entry) - TOOL_KEYS
    if unknown:
        raise ConfigError(f"unknown keys {sorted(unknown)} (allowed: {sorted(TOOL_KEYS)})")
    missing = REQUIRED_KEYS - set(entry)
    if missing:
        raise ConfigError(f"missing {sorted(missing)} (§5.1: a registration must provide them)")
    for key in ("upstream", "title", "description"):
        if key in entry and (not isinstance(entry[key], str) or not entry[key]):
            raise ConfigError(f"{key} is a non-empty string")
    for key in ("arguments", "resultSchema"):
        if key in entry:
            _check_schema(key, entry[key])
    contract = ToolContract(
        name=name,
        upstream=entry.get("upstream", name),
        mcplet_type=entry["mcpletType"],
        visibility=list(entry["visibility"]) if isinstance(entry["visibility"], list) else [],
        pool=entry.get("pool"),
        auth=dict(entry["auth"]) if isinstance(entry.get("auth"), Mapping) else entry.get("auth"),
        title=entry.get("title"),
        description=entry.get("description"),
        arguments=entry.get("arguments"),
        result_schema=entry.get("resultSchema"),
    )
    contract.meta(contract.description or "checked again with the upstream's description")
    return contract


def _check_schema(key: str, schema: Any) -> None:
    if not isinstance(schema, dict):
        raise ConfigError(f"{key} is a JSON Schema object")
    try:
        validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError as exc:
        raise ConfigError(f"{key} is not a valid JSON Schema: {exc.message}") from None
