"""The ERP MCPlet: `query_erp` (read, pool-less, model-visible) — stock per item.

python -m mcplets.restaurant.erp [--transport streamable-http --port 9107]
"""

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from mcplets import register_model_tool
from mcplets.restaurant.common import Tool, api_get, main

TOOL = Tool("query_erp", "read", ("model",))
server = MCPServer("restaurant-erp")

RESULT_SCHEMA = {
    "type": "object",
    "properties": {
        "item": {"type": "string"},
        "asOf": {"type": "string"},
        "count": {"type": "integer"},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string"},
                    "name": {"type": "string"},
                    "category": {"type": "string"},
                    "stock": {"type": "number"},
                    "unit": {"type": "string"},
                    "expiresOn": {"type": "string"},
                    "expiresInDays": {"type": "integer"},
                },
                "required": ["sku", "name", "category", "stock", "unit"],
            },
        },
    },
    "required": ["item", "count", "items"],
}


def query_erp(
    item: Annotated[
        str,
        Field(
            description="a category (dessert, meat, fish, vegetable, drink), a SKU such as D01, "
            "or part of an item's name; empty for everything"
        ),
    ] = "dessert",
):
    data = api_get("/erp/inventory", item=item)
    lines = [
        f"{i['sku']} {i['name']}: {i['stock']}{i['unit']} (expires {i['expiresOn']})"
        for i in data["items"]
    ]
    return TOOL.answer(data, "\n".join([f"Stock of {data['item']} on {data['asOf']}:", *lines]))


register_model_tool(
    server,
    TOOL.name,
    query_erp,
    mcplet_type="read",
    title="ERP: stock",
    description="Read the restaurant's stock from the ERP: quantity, unit and expiry date per "
    "item, for a category (e.g. dessert), a SKU or an item name.",
    result_schema=RESULT_SCHEMA,
)

if __name__ == "__main__":
    main(server, 9107, __doc__)
