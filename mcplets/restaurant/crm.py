"""The CRM MCPlet: `query_crm` (read, pool-less, model-visible) — customers and reservations.

python -m mcplets.restaurant.crm [--transport streamable-http --port 9106]
"""

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from mcplets import register_model_tool
from mcplets.restaurant.common import Tool, api_get, main

TOOL = Tool("query_crm", "read", ("model",))
server = MCPServer("restaurant-crm")

CUSTOMER = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "name": {"type": "string"},
        "email": {"type": "string"},
        "rank": {"type": "string"},
        "visits": {"type": "integer"},
        "cancel_tendency": {
            "type": "object",
            "properties": {"rain": {"type": "number"}, "overall": {"type": "number"}},
        },
    },
    "required": ["id", "name", "email"],
}
RESERVATION = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "date": {"type": "string"},
        "time": {"type": "string"},
        "partySize": {"type": "integer"},
        "course": {"type": "string"},
        "status": {"type": "string"},
        "customer": {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "name": {"type": "string"},
                "email": {"type": "string"},
            },
            "required": ["id", "name", "email"],
        },
    },
    "required": ["id", "date", "time", "partySize", "status", "customer"],
}
RESULT_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"enum": ["customers", "reservations"]},
        "filter": {"type": "string"},
        "threshold": {"type": "number"},
        "date": {"type": "string"},
        "count": {"type": "integer"},
        "customers": {"type": "array", "items": CUSTOMER},
        "reservations": {"type": "array", "items": RESERVATION},
    },
    "required": ["query", "count"],
}


def query_crm(
    query: Annotated[
        Literal["customers", "reservations"],
        Field(description="customers: the customer list; reservations: the bookings of a day"),
    ] = "customers",
    filter: Annotated[
        str | None,
        Field(
            description="rain_cancel_tendency: only customers whose rain-day cancellation "
            "tendency is high (for reservations: only their bookings)"
        ),
    ] = None,
    date: Annotated[
        str | None,
        Field(description="reservations: YYYY-MM-DD, today or tomorrow (default tomorrow)"),
    ] = None,
    customer_id: Annotated[
        str | None, Field(description="customers: one customer, e.g. C001")
    ] = None,
):
    if query == "reservations":
        data: dict[str, Any] = api_get("/crm/reservations", date=date, filter=filter)
        result = {"query": query, **data}
        lines = [
            f"{r['time']} {r['customer']['name']} ({r['customer']['email']}) "
            f"{r['partySize']}名 {r['course']} [{r['status']}]"
            for r in data["reservations"]
        ]
        summary = (
            f"Reservations on {data['date']}: {data['count']} ({data['confirmed']} confirmed, "
            f"{data['covers']} guests)"
            + (" with a high rain cancellation tendency" if filter else "")
        )
    else:
        data = api_get("/crm/customers", filter=filter, id=customer_id)
        result = {"query": query, **data}
        lines = [
            f"{c['id']} {c['name']} <{c['email']}> rain {c['cancel_tendency']['rain']:.2f}"
            for c in data["customers"]
        ]
        summary = f"Customers: {data['count']}" + (
            f" with a rain cancellation tendency >= {data['threshold']}"
            if "threshold" in data
            else ""
        )
    return TOOL.answer(result, "\n".join([summary, *lines]))


register_model_tool(
    server,
    TOOL.name,
    query_crm,
    mcplet_type="read",
    title="CRM: customers and reservations",
    description="Query the restaurant's CRM: customers (optionally only those who often cancel "
    "on rainy days: filter=rain_cancel_tendency, with their cancel_tendency scores) or the "
    "reservations of a day (date YYYY-MM-DD or 'tomorrow'; each with the customer's name and "
    "e-mail, time, party size, course and status).",
    result_schema=RESULT_SCHEMA,
)

if __name__ == "__main__":
    main(server, 9106, __doc__)
