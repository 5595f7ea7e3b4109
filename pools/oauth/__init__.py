"""Servers behind OAuth (the MCP authorization spec): the grant the host holds for each, how an
operator connects one (`connect`), and how every process gets a fresh access token (`tokens`).
The OAuth protocol itself is the `mcp` SDK's (`mcp.client.auth`); this package is the Django
part: where tokens live, who may start a flow, and what the operator sees."""
