"""The HR MCPlet: `query_hr` (read, pool-less, model-visible) — who works on a day.

python -m mcplets.restaurant.hr [--transport streamable-http --port 9108]
"""

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from mcplets import register_model_tool
from mcplets.restaurant.common import Tool, api_get, main

TOOL = Tool("query_hr", "read", ("model",))
server = MCPServer("restaurant-hr")

RESULT_SCHEMA = {
    "type": "object",
    "properties": {
        "date": {"type": "string"},
        "count": {"type": "integer"},
        "staff": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "name": {"type": "string"},
                    "role": {"type": "string"},
                    "roleJa": {"type": "string"},
                    "shift": {"type": "string"},
                },
                "required": ["id", "name", "role", "shift"],
            },
        },
    },
    "required": ["date", "count", "staff"],
}


def query_hr(
    date: Annotated[str, Field(description="YYYY-MM-DD, today or tomorrow")] = "tomorrow",
    role: Annotated[
        str | None,
        Field(
            description="only this role: store_manager, head_chef, pastry_chef, cook, hall, "
            "sommelier"
        ),
    ] = None,
):
    data = api_get("/hr/staff", date=date, role=role)
    lines = [f"{s['name']} ({s['roleJa']}, {s['role']}): {s['shift']}" for s in data["staff"]]
    return TOOL.answer(data, "\n".join([f"Staff on {data['date']}: {data['count']}", *lines]))


register_model_tool(
    server,
    TOOL.name,
    query_hr,
    mcplet_type="read",
    title="HR: staff on shift",
    description="List the staff on shift on a day (name, role, shift hours), optionally for "
    "one role — e.g. to check that a campaign can be staffed.",
    result_schema=RESULT_SCHEMA,
)

if __name__ == "__main__":
    main(server, 9108, __doc__)
