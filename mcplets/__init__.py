"""The MCPlet author's kit: code-first registration, result envelopes, schema resources and the
verify-assertion client for strict tools.

An MCPlet is an ordinary MCP server; this package depends only on the `mcp` SDK and
`jsonschema`, never on the host.
"""

from mcplets.envelope import (
    MCPLET_TYPES,
    VISIBILITIES,
    Envelope,
    ErrorCode,
    MCPletError,
    error,
    ok,
    utc_timestamp,
)
from mcplets.registration import (
    AUTH_ENFORCEMENTS,
    DISPLAY_MODES,
    MCPletRegistrationError,
    MCPletRegistrationWarning,
    app_tool,
    dual_tool,
    mcplet_auth_from,
    model_tool,
    register_app_tool,
    register_dual_tool,
    register_model_tool,
    register_result_schema,
    register_tool,
    result_schema_uri,
)
from mcplets.verify import averify_assertion, verify_assertion

__all__ = [
    "AUTH_ENFORCEMENTS",
    "DISPLAY_MODES",
    "MCPLET_TYPES",
    "VISIBILITIES",
    "Envelope",
    "ErrorCode",
    "MCPletError",
    "MCPletRegistrationError",
    "MCPletRegistrationWarning",
    "app_tool",
    "averify_assertion",
    "dual_tool",
    "error",
    "mcplet_auth_from",
    "model_tool",
    "ok",
    "register_app_tool",
    "register_dual_tool",
    "register_model_tool",
    "register_result_schema",
    "register_tool",
    "result_schema_uri",
    "utc_timestamp",
    "verify_assertion",
]
