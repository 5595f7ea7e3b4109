"""The reference MCPlets of the restaurant scenario (plan §4): eight independent MCP servers,
one per MCPlet, and the backing service they call.

| module | tool | type | pool | visibility | auth | HTTP port |
|---|---|---|---|---|---|---|
| `site_stats` | read_site_stats | read | media-pool | model | — | 9101 |
| `mail` | send_email | action | media-pool | app | passkey strict | 9102 |
| `sns` | post_sns | action | media-pool | app | passkey strict | 9103 |
| `web` | fetch_web_content | read | info-pool | model | — | 9104 |
| `external_api` | call_external_api | read | info-pool | model | — | 9105 |
| `crm` | query_crm | read | — | model | — | 9106 |
| `erp` | query_erp | read | — | model | — | 9107 |
| `hr` | query_hr | read | — | model | — | 9108 |

    python -m mcplets.restaurant.backend [--port 5100]            # the backing service
    python -m mcplets.restaurant.crm                               # one MCPlet over stdio
    python -m mcplets.restaurant.crm --transport streamable-http --port 9106
    python -m mcplets.restaurant --backend --host 0.0.0.0         # all eight over HTTP (+ backend)

The MCPlets import nothing from the host; they reach the backing service at
`RESTAURANT_API_URL` (default http://127.0.0.1:5100).
"""

from typing import NamedTuple


class ServerInfo(NamedTuple):
    module: str  # mcplets.restaurant.<module>
    tool: str
    port: int  # its default streamable HTTP port

    @property
    def name(self) -> str:
        """The McpServer name the host registers it under."""
        return "restaurant-" + self.module.replace("_", "-")

    @property
    def dotted(self) -> str:
        return f"mcplets.restaurant.{self.module}"


SERVERS = (
    ServerInfo("site_stats", "read_site_stats", 9101),
    ServerInfo("mail", "send_email", 9102),
    ServerInfo("sns", "post_sns", 9103),
    ServerInfo("web", "fetch_web_content", 9104),
    ServerInfo("external_api", "call_external_api", 9105),
    ServerInfo("crm", "query_crm", 9106),
    ServerInfo("erp", "query_erp", 9107),
    ServerInfo("hr", "query_hr", 9108),
)
# The servers whose action needs the host's verify-assertion endpoint (strict passkey).
STRICT_MODULES = ("mail", "sns")
