"""The reference PWMA wallet through the host's gateway: the host declares elicitations, a
mandate's -32042 step-up reaches the agent whole (its QR payload, its URL and domain), the
presence provider completes it (the wallet tells the session that asked), and the same request
then returns the mandate; the other PWMA errors are told apart."""

import sys

import anyio
import httpx
import pytest

from agents.models import Agent
from mcplet_host import gateway
from mcplets.examples.pwma_wallet import serve
from pools.discovery import discover
from pools.mcp_client import ServerConfig, open_session
from pools.models import Mcplet, McpServer

pytestmark = pytest.mark.django_db

INTENT = {"type": "mandate", "payee": "Shinjuku Bistro", "maxAmount": 120}


@pytest.fixture(scope="module")
def wallet(tmp_path_factory):
    calls = tmp_path_factory.mktemp("wallet") / "calls.jsonl"
    with serve(calls_log=calls) as base:
        yield base


@pytest.fixture
def agent(wallet):
    server = McpServer.objects.create(name="wallet", transport="http", url=f"{wallet}/mcp")
    discover(server)
    return Agent.objects.create(agent_id="planning-agent", display_name="Planning")


def request(agent, request_id, intent=INTENT):
    arguments = {"requestId": request_id, "walletIntent": intent}
    return gateway.call_tool(agent, "aaif.pwma.request", arguments).envelope


def test_the_wallets_tools_are_mcplets(agent):
    types = dict(Mcplet.objects.routable().values_list("name", "mcplet_type"))
    assert types == {
        "aaif.pwma.request": "prepare",
        "aaif.pwma.get": "read",
        "aaif.pwma.metadata": "read",
    }
    metadata = gateway.call_tool(agent, "aaif.pwma.metadata", {}).envelope["result"]
    assert metadata["profiles"] == ["pwma-over-mcp-0.2.0"]


def test_a_mandate_steps_up_then_the_same_request_returns_it(agent, wallet):
    first = request(agent, "req-1")["error"]

    assert first["code"] == "X_PWMA_INTERACTION_REQUIRED" and first["retryable"] is False
    qr, url = first["details"]["elicitations"]
    assert qr["mode"] == "qr" and qr["qrPayload"].startswith(f"happ:v1:{qr['elicitationId']}:")
    assert url == {
        "mode": "url",
        "elicitationId": qr["elicitationId"],
        "message": "Approve a mandate for Shinjuku Bistro",
        "url": f"{wallet}/presence/{qr['elicitationId']}",
        "domain": "127.0.0.1",
    }
    # Until the holder acts, asking again asks for the same step (idempotent on requestId).
    again = request(agent, "req-1")["error"]["details"]["elicitations"]
    assert again[0]["elicitationId"] == qr["elicitationId"]

    page = httpx.post(url["url"])
    assert page.status_code == 200 and "Approved" in page.text

    mandate = request(agent, "req-1")["result"]
    assert mandate["requestId"] == "req-1" and mandate["status"] == "completed"
    (artifact,) = mandate["artifacts"]
    assert artifact["type"] == "pwma.mandate" and artifact["intent"] == INTENT
    fetched = gateway.call_tool(agent, "aaif.pwma.get", {"ref": artifact["ref"]}).envelope
    assert fetched["result"]["artifacts"] == [artifact]


def test_a_mandate_beyond_the_holders_policy_is_denied(agent):
    error = request(agent, "req-2", INTENT | {"maxAmount": 10_000})["error"]
    assert (error["code"], error["retryable"]) == ("X_PWMA_POLICY_DENIED", False)


def test_an_unsupported_request_is_a_bad_request(agent):
    error = request(agent, "req-3", {"type": "credential-offer"})["error"]
    assert error["code"] == "X_PWMA_BAD_REQUEST"


async def _ask(config, request_id, **session_options):
    async with open_session(config, timeout=10, **session_options) as session:
        arguments = {"requestId": request_id, "walletIntent": INTENT}
        try:
            await session.call_tool("aaif.pwma.request", arguments)
        except Exception as exc:
            return exc.code, exc.data
    return None, None


@pytest.mark.parametrize("transport", ["streamable-http", "stdio"])
def test_the_host_declares_elicitations_on_both_transports(wallet, transport):
    if transport == "stdio":
        args = ("-m", "mcplets.examples.pwma_wallet", "--transport", "stdio")
        config = ServerConfig(id=1, name="wallet", transport="stdio", command=sys.executable)
        config = ServerConfig(**{**config.__dict__, "args": args})
    else:
        config = ServerConfig(id=1, name="wallet", transport="http", url=f"{wallet}/mcp")

    code, _ = anyio.run(_ask, config, f"req-{transport}")

    assert code == -32042  # a client without the declaration is refused with -32041 (below)


def test_a_client_that_declares_nothing_is_refused_and_completion_is_notified(wallet):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def bare():
        async with (
            streamable_http_client(f"{wallet}/mcp") as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            try:
                await session.call_tool("aaif.pwma.request", {"requestId": "bare"})
            except Exception as exc:
                return exc.code

    assert anyio.run(bare) == -32041

    heard = []

    async def notified():
        async def handler(message):
            heard.append(getattr(message, "method", None) and message.params.elicitation_id)

        config = ServerConfig(id=2, name="wallet", transport="http", url=f"{wallet}/mcp")
        async with open_session(config, timeout=10, message_handler=handler) as session:
            try:
                await session.call_tool(
                    "aaif.pwma.request", {"requestId": "told", "walletIntent": INTENT}
                )
            except Exception as exc:
                step = exc.data["elicitations"][1]
            async with httpx.AsyncClient() as client:
                await client.post(step["url"])
            with anyio.fail_after(10):
                while not heard:
                    await anyio.sleep(0.05)
            return step["elicitationId"]

    assert heard == [anyio.run(notified)]
