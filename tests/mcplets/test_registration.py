"""Registration rules (spec §4, §5.1, §5.3.1, §6) and what `tools/list` publishes."""

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from mcplets import (
    MCPletRegistrationError,
    MCPletRegistrationWarning,
    app_tool,
    dual_tool,
    model_tool,
    register_app_tool,
    register_dual_tool,
    register_model_tool,
    register_tool,
)

pytestmark = pytest.mark.anyio

STRICT = {"required": "passkey", "enforcement": "strict", "promptMessage": "Approve the e-mail"}


def send_email(to: str, body: str) -> dict:
    return {"sent": to}


@pytest.fixture(params=["legacy", "auto"])
def mode(request):
    """`legacy`: JSON-RPC over in-memory streams; `auto`: the SDK's direct in-process path."""
    return request.param


async def list_meta(server, mode):
    async with Client(server, mode=mode) as client:
        return {tool.name: tool.meta for tool in (await client.list_tools()).tools}


async def test_tools_list_shows_mcplet_meta(mode):
    server = MCPServer("meta")
    register_model_tool(
        server,
        "read_site_stats",
        lambda: {},
        mcplet_type="read",
        description="Booking-site statistics",
        pool="media-pool",
        result_schema={"type": "object"},
    )
    register_dual_tool(
        server,
        "check_stock",
        lambda item: {},
        mcplet_type="prepare",
        description="Check dessert stock",
        ui={"resourceUri": "ui://stock/app.html", "displayMode": "inline"},
    )
    register_app_tool(
        server,
        "send_email",
        send_email,
        mcplet_type="action",
        description="Send an e-mail",
        pool="media-pool",
        auth=STRICT,
    )

    meta = await list_meta(server, mode)

    assert meta == {
        "read_site_stats": {
            "mcpletType": "read",
            "visibility": ["model"],
            "pool": "media-pool",
            "mcpletToolResultSchemaUri": "mcplet://tool-result-schema/read_site_stats",
        },
        "check_stock": {
            "mcpletType": "prepare",
            "visibility": ["model", "app"],
            "ui": {"resourceUri": "ui://stock/app.html", "displayMode": "inline"},
        },
        "send_email": {
            "mcpletType": "action",
            "visibility": ["app"],
            "pool": "media-pool",
            "auth": STRICT,
        },
    }


async def test_input_schema_comes_from_the_signature_without_context(mode):
    server = MCPServer("schema")
    register_app_tool(
        server, "send_email", send_email, mcplet_type="action", description="d", auth=STRICT
    )

    async with Client(server, mode=mode) as client:
        (tool,) = (await client.list_tools()).tools

    assert tool.input_schema["required"] == ["to", "body"]
    assert set(tool.input_schema["properties"]) == {"to", "body"}
    assert tool.description == "d"


def test_register_returns_the_published_meta():
    meta = register_dual_tool(
        MCPServer("m"),
        "send_email",
        send_email,
        mcplet_type="action",
        description="d",
        auth={"required": "passkey", "enforcement": "host-only"},
    )

    assert meta == {
        "mcpletType": "action",
        "visibility": ["model", "app"],
        "auth": {"required": "passkey", "enforcement": "host-only"},
    }


@pytest.mark.parametrize("mcplet_type", ["write", "Read", "", None])
def test_unknown_mcplet_type_is_refused(mcplet_type):
    with pytest.raises(
        MCPletRegistrationError, match="§4: mcpletType MUST be one of read, prepare, action"
    ):
        register_app_tool(MCPServer("x"), "t", send_email, mcplet_type=mcplet_type, description="d")


@pytest.mark.parametrize("register", [register_model_tool, register_dual_tool])
def test_model_visible_action_without_auth_is_refused(register):
    with pytest.raises(MCPletRegistrationError, match=r"§4\.2/§5\.3\.1: an action tool whose"):
        register(MCPServer("x"), "send_email", send_email, mcplet_type="action", description="d")


@pytest.mark.parametrize(
    ("auth", "rule"),
    [
        ({"required": "password", "enforcement": "strict"}, "auth.required MUST be 'passkey'"),
        ({"enforcement": "strict"}, "auth.required MUST be 'passkey'"),
        ({"required": "passkey", "enforcement": "lenient"}, "auth.enforcement MUST be"),
        ({"required": "passkey"}, "auth.enforcement MUST be"),
        ({"required": "passkey", "enforcement": "strict", "prompt_message": "x"}, "unknown auth"),
        ({"required": "passkey", "enforcement": "strict", "promptMessage": 3}, "promptMessage"),
        ("passkey", "auth is an object"),
    ],
)
def test_malformed_auth_is_refused(auth, rule):
    with pytest.raises(MCPletRegistrationError, match=f"§6.7.*{rule}"):
        register_app_tool(
            MCPServer("x"), "t", send_email, mcplet_type="action", description="d", auth=auth
        )


@pytest.mark.parametrize(
    ("options", "rule"),
    [
        ({"description": ""}, "§5.1: a registration MUST provide a description"),
        ({"pool": ""}, "§6.2"),
        ({"ui": {"displayMode": "popup"}}, "§6.6: ui.displayMode MUST be one of"),
        ({"result_schema": {"type": "nonsense"}}, "§9.4: result_schema is not a valid JSON"),
        ({"result_schema": {"type": "object"}, "result_schema_version": 0}, "§9.3"),
    ],
)
def test_other_malformed_registrations_are_refused(options, rule):
    options = {"mcplet_type": "read", "description": "d"} | options
    with pytest.raises(MCPletRegistrationError, match=rule):
        register_model_tool(MCPServer("x"), "t", lambda: 1, **options)


def test_registration_error_is_a_value_error():
    assert issubclass(MCPletRegistrationError, ValueError)


def test_should_rules_warn():
    server = MCPServer("x")
    with pytest.warns(MCPletRegistrationWarning, match="§5.1: action tools SHOULD declare"):
        register_app_tool(server, "a", send_email, mcplet_type="action", description="d")
    with pytest.warns(MCPletRegistrationWarning, match="§4.2: read tools SHOULD NOT require"):
        register_model_tool(
            server, "r", lambda: 1, mcplet_type="read", description="d", auth=STRICT
        )


async def test_decorators_register_with_name_and_docstring(mode):
    server = MCPServer("decorated")

    @model_tool(server, mcplet_type="read")
    def query_crm(segment: str) -> list:
        """Customers of a segment."""
        return []

    @dual_tool(server, "draft_post", mcplet_type="prepare", description="Draft a post")
    def draft(text: str) -> dict:
        return {}

    @app_tool(server, mcplet_type="action", auth=STRICT)
    def post_sns(text: str) -> dict:
        """Post on SNS."""
        return {}

    async with Client(server, mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}

    assert query_crm("x") == []  # the decorator returns the function unchanged
    assert tools["query_crm"].description == "Customers of a segment."
    assert tools["query_crm"].meta["visibility"] == ["model"]
    assert tools["draft_post"].meta["visibility"] == ["model", "app"]
    assert tools["post_sns"].meta == {"mcpletType": "action", "visibility": ["app"], "auth": STRICT}


@pytest.mark.parametrize("visibility", [["llm"], [], ["app", "model"], ["model", "model"]])
def test_register_tool_refuses_other_visibilities(visibility):
    with pytest.raises(MCPletRegistrationError, match="§8.1: visibility MUST be one of"):
        register_tool(
            MCPServer("x"),
            "t",
            lambda: 1,
            visibility=visibility,
            mcplet_type="read",
            description="d",
        )
