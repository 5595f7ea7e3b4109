"""The site-access MCPlet: `read_site_stats` (read, media-pool, model-visible) — the booking
site's (EPARK) access statistics.

    python -m mcplets.restaurant.site_stats [--transport streamable-http --port 9101]
"""

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from mcplets import register_model_tool
from mcplets.restaurant.common import Tool, api_get, main

TOOL = Tool("read_site_stats", "read", ("model",))
server = MCPServer("restaurant-site-stats")

COUNTS = {
    key: {"type": "integer"}
    for key in ("pageViews", "uniqueVisitors", "bookingPageViews", "bookings", "cancellations")
}
RESULT_SCHEMA = {
    "type": "object",
    "properties": {
        "site": {"type": "string"},
        "shopPage": {"type": "string"},
        "period": {
            "type": "object",
            "properties": {
                "from": {"type": "string"},
                "to": {"type": "string"},
                "days": {"type": "integer"},
            },
            "required": ["from", "to", "days"],
        },
        "totals": {
            "type": "object",
            "properties": {
                **COUNTS,
                "bookingConversionRate": {"type": "number"},
                "cancellationRate": {"type": "number"},
            },
            "required": list(COUNTS),
        },
        "daily": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"date": {"type": "string"}, **COUNTS},
                "required": ["date", *COUNTS],
            },
        },
        "topReferrers": {"type": "array"},
        "topKeywords": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["site", "period", "totals", "daily"],
}


def read_site_stats(
    days: Annotated[int, Field(ge=1, le=7, description="how many days up to today")] = 7,
):
    data = api_get("/site/stats", days=days)
    totals = data["totals"]
    summary = (
        f"{data['site']} {data['period']['from']}…{data['period']['to']}: "
        f"{totals['pageViews']} page views, {totals['bookings']} bookings "
        f"({totals['bookingConversionRate']:.1%} of booking-page views), "
        f"{totals['cancellations']} cancellations ({totals['cancellationRate']:.1%})"
    )
    return TOOL.answer(data, summary)


register_model_tool(
    server,
    TOOL.name,
    read_site_stats,
    mcplet_type="read",
    title="Booking-site access statistics",
    description="Read the booking site's (EPARK) access statistics for the store: page views, "
    "visitors, booking-page views, bookings and cancellations per day, with totals, top "
    "referrers and search keywords.",
    pool="media-pool",
    result_schema=RESULT_SCHEMA,
)

if __name__ == "__main__":
    main(server, 9101, __doc__)
