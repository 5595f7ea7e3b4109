"""The MCPlet adapter: an MCPlet server in front of an MCP server that is not one (issue 19).

    python -m mcplets.adapt CONFIG -- COMMAND [ARG...]      # a stdio upstream
    python -m mcplets.adapt CONFIG --url URL                 # a streamable-HTTP upstream
    python -m mcplets.adapt --suggest [-o FILE] -- COMMAND   # a draft CONFIG to review

See `mcplets.adapter.config` for the configuration and `mcplets/adapter/examples/`.
Like the rest of the kit it never imports the host; it reads its configuration with PyYAML.
"""
