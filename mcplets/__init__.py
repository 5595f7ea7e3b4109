"""The MCPlet author's kit: code-first registration, result envelopes, schema resources and the
verify-assertion client for strict tools.

An MCPlet is an ordinary MCP server; this package depends only on the `mcp` SDK and
`jsonschema`, never on the host.

Its names load on first use (PEP 562): the host needs the envelopes and the spec's constants at
start-up, not the MCP server SDK that registration brings (about a second to import).
"""

import importlib

_EXPORTS = {
    **dict.fromkeys(
        [
            "AUTH_ENFORCEMENTS",
            "MCPLET_TYPES",
            "VISIBILITIES",
            "Envelope",
            "ErrorCode",
            "MCPletError",
            "error",
            "ok",
            "recovery_hints",
            "utc_timestamp",
        ],
        "envelope",
    ),
    **dict.fromkeys(
        [
            "DISPLAY_MODES",
            "MCPletRegistrationError",
            "MCPletRegistrationWarning",
            "app_tool",
            "dual_tool",
            "mcplet_auth_from",
            "model_tool",
            "register_app_tool",
            "register_dual_tool",
            "register_model_tool",
            "register_result_schema",
            "register_tool",
            "result_schema_uri",
        ],
        "registration",
    ),
    **dict.fromkeys(["averify_assertion", "verify_assertion"], "verify"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *_EXPORTS})
