"""The external-API MCPlet: `call_external_api` (read, info-pool, model-visible) — the
supplier's stock and events near the store.

    python -m mcplets.restaurant.external_api [--transport streamable-http --port 9105]
"""

from typing import Annotated, Literal

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from mcplets import register_model_tool
from mcplets.restaurant.common import Tool, api_get, main

TOOL = Tool("call_external_api", "read", ("model",))
server = MCPServer("restaurant-external-api")

RESULT_SCHEMA = {
    "type": "object",
    "properties": {
        "source": {"enum": ["supplier_stock", "local_events"]},
        "asOf": {"type": "string"},
        "date": {"type": "string"},
        "count": {"type": "integer"},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "item": {"type": "string"},
                    "supplier": {"type": "string"},
                    "available": {"type": "boolean"},
                },
                "required": ["item", "supplier", "available"],
            },
        },
        "events": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "status": {"type": "string"}},
                "required": ["name", "status"],
            },
        },
    },
    "required": ["source", "count"],
}


def call_external_api(
    source: Annotated[
        Literal["supplier_stock", "local_events"],
        Field(
            description="supplier_stock: the suppliers' stock and lead times; local_events: "
            "events near the store on a day"
        ),
    ],
    item: Annotated[str | None, Field(description="supplier_stock: part of an item name")] = None,
    date: Annotated[
        str | None, Field(description="local_events: YYYY-MM-DD, today or tomorrow")
    ] = None,
):
    if source == "supplier_stock":
        data = api_get("/external/supplier-stock", item=item)
        lines = [
            f"{i['item']} ({i['supplier']}): "
            + (f"{i['quantity']}, {i['leadTimeDays']} day(s)" if i["available"] else "unavailable")
            + (f" — {i['note']}" if i.get("note") else "")
            for i in data["items"]
        ]
        summary = f"Supplier stock on {data['asOf']}:"
    else:
        data = api_get("/external/local-events", date=date)
        lines = [f"{e['name']}: {e['status']} {e.get('note', '')}".rstrip() for e in data["events"]]
        summary = f"Events near the store on {data['date']}: {data['count']}"
    return TOOL.answer(data, "\n".join([summary, *lines]))


register_model_tool(
    server,
    TOOL.name,
    call_external_api,
    mcplet_type="read",
    title="External APIs: suppliers and local events",
    description="Call an external partner API: the suppliers' stock, lead times and price "
    "trends (source=supplier_stock), or the events near the store on a day "
    "(source=local_events).",
    pool="info-pool",
    result_schema=RESULT_SCHEMA,
)

if __name__ == "__main__":
    main(server, 9105, __doc__)
