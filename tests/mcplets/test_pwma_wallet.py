"""The reference PWMA wallet through the host's gateway: the host declares elicitations, a
mandate's -32042 step-up reaches the agent whole (its QR payload, its URL and domain), the
presence provider completes it (the wallet tells the session that asked), and the same request
then returns the mandate; the other PWMA errors are told apart."""

import sys
import time

import anyio
import httpx
import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client import REGISTRY

from agents.models import Agent
from held.kinds import step_up
from held.models import Ceremony
from held.tasks import expire_ceremonies
from mcplet_host import gateway
from mcplet_host.models import AuditEvent
from mcplets.examples.pwma_wallet import serve
from pools.discovery import discover
from pools.mcp_client import ServerConfig, open_session
from pools.models import Mcplet, McpServer
from tests import processes
from tests.conftest import Calls
from tests.processes import celery_worker

pytestmark = pytest.mark.django_db

INTENT = {"type": "mandate", "payee": "Shinjuku Bistro", "maxAmount": 120}


@pytest.fixture(scope="module")
def wallet_calls(tmp_path_factory):
    return Calls(tmp_path_factory.mktemp("wallet") / "calls.jsonl")


@pytest.fixture(scope="module")
def wallet(wallet_calls):
    with serve(calls_log=wallet_calls.path) as base:
        yield base


@pytest.fixture
def calls(wallet_calls):
    """What the wallet received (one wallet for the module: each test has its requestIds)."""
    return wallet_calls


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


def requests_for(calls, request_id):
    return [c for c in calls() if c["arguments"].get("requestId") == request_id]


def wait_until(condition, timeout=15):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def trail(trace):
    """The audit trail of a step-up, in order, as (event type, result)."""
    events = AuditEvent.objects.filter(trace_id=trace).order_by("pk")
    return [(e.event_type, e.result) for e in events if e.event_type != "PERMISSION_GRANTED"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager")
def test_a_step_up_is_held_and_the_wallets_notification_sends_the_same_call_again(
    agent, wallet, calls
):
    arguments = {"requestId": "req-1", "walletIntent": INTENT}
    held_calls = {"tool": "aaif.pwma.request", "pool": "", "outcome": "held"}
    before = REGISTRY.get_sample_value("mcplet_tool_calls_total", held_calls) or 0
    outcome = gateway.call_tool(agent, "aaif.pwma.request", arguments, trace="ctx-step")

    assert outcome.status == "pending"
    assert REGISTRY.get_sample_value("mcplet_tool_calls_total", held_calls) == before + 1
    held = outcome.ceremony
    assert held.kind == Ceremony.Kind.STEP_UP and held.status == Ceremony.Status.PENDING
    qr, url = held.elicitations
    assert qr["mode"] == "qr" and qr["qrPayload"].startswith(f"happ:v1:{qr['elicitationId']}:")
    assert url == {
        "mode": "url",
        "elicitationId": qr["elicitationId"],
        "message": "Approve a mandate for Shinjuku Bistro",
        "url": f"{wallet}/presence/{qr['elicitationId']}",
        "domain": wallet.removeprefix("http://"),  # its host and port
    }
    assert len(requests_for(calls, "req-1")) == 1

    page = httpx.post(url["url"])  # the holder approves on the presence provider
    assert page.status_code == 200 and "Approved" in page.text

    # The wallet tells this process's session; a task completes the step and retries once.
    wait_until(lambda: Ceremony.objects.get(pk=held.pk).is_final)
    held.refresh_from_db()
    assert held.status == Ceremony.Status.EXECUTED
    mandate = held.result["result"]
    assert mandate["requestId"] == "req-1" and mandate["artifacts"][0]["intent"] == INTENT
    sent = requests_for(calls, "req-1")
    assert [c["arguments"] for c in sent] == [arguments, arguments]
    assert trail("ctx-step") == [
        ("TOOL_EXECUTED", "FAILURE"),
        ("mcplet.stepup.held", "PENDING"),
        ("mcplet.stepup.completed", "SUCCESS"),
        ("mcplet.stepup.retried", "PENDING"),
        ("TOOL_EXECUTED", "SUCCESS"),
    ]
    completed = AuditEvent.objects.get(event_type="mcplet.stepup.completed")
    assert completed.details["via"] == "notification"
    assert completed.details["elicitationId"] == qr["elicitationId"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager")
def test_finished_too_early_starts_a_new_step_for_the_same_waiter(agent, calls, admin_user):
    arguments = {"requestId": "req-early", "walletIntent": INTENT}
    held = gateway.call_tool(
        agent, "aaif.pwma.request", arguments, continuation_ref="run:call-1"
    ).ceremony

    assert step_up.complete(held, admin_user)  # "I have finished", but the holder has not

    held.refresh_from_db()
    assert held.status == Ceremony.Status.FAILED
    newest = Ceremony.objects.filter(continuation_ref="run:call-1").first()
    assert newest.pk != held.pk and newest.status == Ceremony.Status.PENDING
    assert newest.kind == Ceremony.Kind.STEP_UP and newest.arguments == arguments
    assert len(requests_for(calls, "req-early")) == 2
    completed = AuditEvent.objects.get(event_type="mcplet.stepup.completed")
    assert (completed.actor_id, completed.details["via"]) == (admin_user.username, "person")
    # The first step's page leads on to the new one.
    client = Client()
    client.force_login(admin_user)
    page = client.get(held.get_absolute_url()).content.decode()
    assert "its server asks for another step" in page
    assert f'id="held-again" href="{newest.get_absolute_url()}"' in page


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager")
@pytest.mark.parametrize("end", ["cancel", "expiry"])
def test_cancel_and_expiry_run_nothing_more(agent, calls, admin_user, end):
    request_id = f"req-{end}"
    arguments = {"requestId": request_id, "walletIntent": INTENT}
    held = gateway.call_tool(agent, "aaif.pwma.request", arguments).ceremony

    if end == "cancel":
        assert held.decline(Ceremony.Status.REJECTED, admin_user)
    else:
        Ceremony.objects.filter(pk=held.pk).update(expires_at=timezone.now())
        expire_ceremonies()

    held.refresh_from_db()
    assert held.error["code"] == (
        "X_APPROVAL_REJECTED" if end == "cancel" else "X_APPROVAL_EXPIRED"
    )
    assert step_up.complete(held, admin_user) is False
    assert len(requests_for(calls, request_id)) == 1
    assert not AuditEvent.objects.filter(event_type="mcplet.stepup.retried").exists()


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


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_the_step_completes_in_a_worker_other_than_the_process_that_held_it(
    agent, wallet, calls, tmp_path
):
    """This process holds the call (its session asked, so it hears the wallet's notification);
    a real worker, another process, completes the step and sends the call again."""
    arguments = {"requestId": "req-worker", "walletIntent": INTENT}
    held = gateway.call_tool(agent, "aaif.pwma.request", arguments).ceremony

    with celery_worker(tmp_path / "worker.log", "stepper"):
        httpx.post(held.elicitations[1]["url"])
        processes.wait_until(
            lambda: Ceremony.objects.get(pk=held.pk).is_final, "the worker to send it again"
        )

    held.refresh_from_db()
    assert held.status == Ceremony.Status.EXECUTED
    assert held.result["result"]["requestId"] == "req-worker"
    assert [c["arguments"] for c in requests_for(calls, "req-worker")] == [arguments, arguments]
    completed = AuditEvent.objects.get(event_type="mcplet.stepup.completed")
    assert completed.details["via"] == "notification"
