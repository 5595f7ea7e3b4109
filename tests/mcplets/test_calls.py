"""Tool calls and schema resources against a real MCPServer over the SDK's in-memory transports."""

import json
import logging

import pytest
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent

from mcplets import (
    ErrorCode,
    MCPletError,
    error,
    mcplet_auth_from,
    register_app_tool,
    register_dual_tool,
    register_model_tool,
    register_result_schema,
)

pytestmark = pytest.mark.anyio

STRICT = {"required": "passkey", "enforcement": "strict"}
ASSERTION = {
    "type": "passkey_assertion",
    "challenge": "Y2hhbGxlbmdl",
    "clientDataJSON": "e30",
    "authenticatorData": "AAAA",
    "signature": "c2ln",
    "userHandle": "dXNlcg",
}
STOCK_SCHEMA = {
    "type": "object",
    "properties": {"item": {"type": "string"}, "count": {"type": "integer"}},
    "required": ["item", "count"],
}


@pytest.fixture(params=["legacy", "auto"])
def mode(request):
    """`legacy`: JSON-RPC over in-memory streams; `auto`: the SDK's direct in-process path."""
    return request.param


def build_server() -> MCPServer:
    server = MCPServer("kit-test")

    def query_erp(item: str) -> dict:
        return {"item": item, "count": 12}

    async def query_erp_async(item: str, ctx: Context) -> dict:
        return {"item": item, "count": 3}

    def broken_stock(item: str) -> dict:
        return {"item": item, "count": "many"}

    def find_customer(customer_id: int) -> dict:
        if customer_id != 1:
            raise MCPletError(ErrorCode.NOT_FOUND, f"no customer {customer_id}")
        return {"id": 1}

    def reserve_dessert(item: str) -> dict:
        raise MCPletError("X_OUT_OF_DESSERTS", f"no {item} left", retryable=False)

    def hand_made(note: str) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text=note)])

    def own_envelope() -> dict:
        return error(
            ErrorCode.SERVICE_UNAVAILABLE, "ERP is down", tool_id="own_envelope", mcplet_type="read"
        )

    async def send_email(to: str, ctx: Context) -> dict:
        return {
            "argumentNames": sorted(ctx.request_context.params["arguments"]),
            "mcpletAuth": mcplet_auth_from(ctx),
        }

    def confirm(ctx: Context) -> dict:
        return {"mcpletAuth": mcplet_auth_from(ctx)}

    register_model_tool(
        server,
        "query_erp",
        query_erp,
        mcplet_type="read",
        description="Stock of an item",
        result_schema=STOCK_SCHEMA,
    )
    register_model_tool(
        server, "query_erp_async", query_erp_async, mcplet_type="read", description="d"
    )
    register_model_tool(
        server,
        "broken_stock",
        broken_stock,
        mcplet_type="read",
        description="d",
        result_schema=STOCK_SCHEMA,
    )
    register_dual_tool(server, "find_customer", find_customer, mcplet_type="read", description="d")
    register_dual_tool(
        server, "reserve_dessert", reserve_dessert, mcplet_type="prepare", description="d"
    )
    register_model_tool(server, "hand_made", hand_made, mcplet_type="read", description="d")
    register_model_tool(server, "own_envelope", own_envelope, mcplet_type="read", description="d")
    register_dual_tool(
        server, "send_email", send_email, mcplet_type="action", description="d", auth=STRICT
    )
    register_app_tool(
        server,
        "confirm",
        confirm,
        mcplet_type="action",
        description="d",
        auth={"required": "passkey", "enforcement": "host-only"},
    )
    return server


async def call(mode, name, arguments=None, **kwargs) -> CallToolResult:
    async with Client(build_server(), mode=mode) as client:
        return await client.session.call_tool(name, arguments or {}, **kwargs)


@pytest.mark.parametrize(("tool", "count"), [("query_erp", 12), ("query_erp_async", 3)])
async def test_plain_return_value_is_wrapped_in_the_envelope(mode, tool, count):
    result = await call(mode, tool, {"item": "dessert"})

    envelope = result.structured_content
    assert result.is_error is False
    assert envelope["result"] == {"item": "dessert", "count": count}
    assert envelope["_meta"]["toolId"] == tool
    assert envelope["_meta"]["mcpletType"] == "read"
    assert envelope["_meta"]["visibility"] == ["model"]
    # Text-only hosts get the same envelope as compact JSON.
    assert json.loads(result.content[0].text) == envelope


async def test_mcplet_error_becomes_an_error_envelope(mode):
    result = await call(mode, "find_customer", {"customer_id": 7})

    assert result.is_error is True
    assert result.structured_content["error"] == {"message": "no customer 7", "code": "NOT_FOUND"}
    assert result.structured_content["_meta"]["visibility"] == ["model", "app"]
    assert result.content[0].text == "NOT_FOUND: no customer 7"


async def test_custom_x_code_reaches_the_host(mode):
    result = await call(mode, "reserve_dessert", {"item": "pudding"})

    assert result.is_error is True
    assert result.structured_content["error"] == {
        "message": "no pudding left",
        "code": "X_OUT_OF_DESSERTS",
        "retryable": False,
    }
    assert result.structured_content["_meta"]["mcpletType"] == "prepare"


async def test_call_tool_result_and_envelope_pass_through(mode):
    hand_made = await call(mode, "hand_made", {"note": "as is"})
    own = await call(mode, "own_envelope")

    assert hand_made.structured_content is None
    assert hand_made.content[0].text == "as is"
    assert own.is_error is True
    assert own.structured_content["error"]["code"] == "SERVICE_UNAVAILABLE"
    assert own.content[0].text == "SERVICE_UNAVAILABLE: ERP is down"


async def test_result_breaking_its_schema_is_not_returned(mode, caplog):
    with caplog.at_level(logging.ERROR, logger="mcplets.registration"):
        result = await call(mode, "broken_stock", {"item": "cake"})

    assert result.is_error is True
    assert result.structured_content["error"]["code"] == "UNKNOWN_ERROR"
    assert "many" not in result.content[0].text
    assert "breaks its schema" in caplog.text


async def test_mcplet_auth_reaches_the_handler_through_params_meta(mode):
    result = await call(
        mode, "send_email", {"to": "a@example.com"}, meta={"mcplet_auth": ASSERTION}
    )

    assert result.is_error is False
    assert result.structured_content["result"] == {
        "argumentNames": ["to"],
        "mcpletAuth": ASSERTION,
    }


async def test_strict_tool_without_assertion_is_refused_before_the_handler(mode):
    result = await call(mode, "send_email", {"to": "a@example.com"})

    assert result.is_error is True
    assert result.structured_content["error"]["code"] == "AUTH_REQUIRED"
    assert "result" not in result.structured_content


async def test_host_only_tool_runs_without_assertion(mode):
    result = await call(mode, "confirm")

    assert result.is_error is False
    assert result.structured_content["result"] == {"mcpletAuth": None}


async def test_schema_resource_has_the_payload_and_mime_type(mode):
    async with Client(build_server(), mode=mode) as client:
        resources = {str(r.uri): r for r in (await client.list_resources()).resources}
        read = await client.read_resource("mcplet://tool-result-schema/query_erp")

    assert resources["mcplet://tool-result-schema/query_erp"].mime_type == "application/json"
    (content,) = read.contents
    assert content.mime_type == "application/json"
    payload = json.loads(content.text)
    assert payload["version"] == 1
    assert payload["schema"] == STOCK_SCHEMA
    assert payload["_meta"]["deprecated"] is False
    assert payload["_meta"]["deprecatedAt"] is None
    assert payload["_meta"]["sunsetDate"] is None
    assert payload["_meta"]["createdAt"].endswith("Z")


async def test_new_major_gets_a_versioned_uri_and_the_old_one_stays_deprecated(mode):
    server = MCPServer("versions")
    v1 = register_result_schema(
        server,
        "query_crm",
        {"type": "array"},
        created_at="2026-01-10T00:00:00.000Z",
        deprecated_at="2026-03-01T00:00:00.000Z",
        sunset_date="2026-06-01",
    )
    meta = register_model_tool(
        server,
        "query_crm",
        lambda segment: {"customers": []},
        mcplet_type="read",
        description="d",
        result_schema={"type": "object", "required": ["customers"]},
        result_schema_version=2,
    )

    async with Client(server, mode=mode) as client:
        (tool,) = (await client.list_tools()).tools
        old = json.loads((await client.read_resource(v1)).contents[0].text)
        new_uri = tool.meta["mcpletToolResultSchemaUri"]
        new = json.loads((await client.read_resource(new_uri)).contents[0].text)

    assert v1 == "mcplet://tool-result-schema/query_crm"
    assert (
        new_uri == meta["mcpletToolResultSchemaUri"] == "mcplet://tool-result-schema/query_crm/v2"
    )
    assert old == {
        "version": 1,
        "schema": {"type": "array"},
        "_meta": {
            "createdAt": "2026-01-10T00:00:00.000Z",
            "deprecated": True,
            "deprecatedAt": "2026-03-01T00:00:00.000Z",
            "sunsetDate": "2026-06-01",
        },
    }
    assert new["version"] == 2
    assert new["schema"] == {"type": "object", "required": ["customers"]}
    assert new["_meta"]["deprecated"] is False


def test_sunset_needs_a_deprecation():
    with pytest.raises(ValueError, match="§9.5"):
        register_result_schema(MCPServer("x"), "t", {"type": "object"}, sunset_date="2026-06-01")
