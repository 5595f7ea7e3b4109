"""End to end: the reference filesystem server (npm, not written by us) behind the adapter and
its example configuration, registered on the host as any stdio MCPlet server. The host keeps
its rules; a write is held, approved with a passkey, verified by the adapter with the host's
/auth/verify-assertion, and only then reaches the filesystem. What the server did is read from
the disk."""

import time

import anyio
import pytest
import yaml
from django.core.cache import cache

from agents.models import Agent
from held.models import Ceremony
from mcplet_host import gateway
from passkey.challenges import CHALLENGE_TTL
from pools.discovery import discover
from pools.models import Mcplet, McpServer, Pool
from tests.adapter.conftest import EXAMPLES, adapter_args, adapter_session, suggested_draft
from tests.passkey.conftest import configure, post_assertion, sign

pytestmark = pytest.mark.django_db(transaction=True)
CONFIG = EXAMPLES / "filesystem.yaml"


@pytest.fixture
def endpoint(live_server):
    return f"{live_server.url}/auth/verify-assertion"


@pytest.fixture
def files(filesystem_bin, shared, endpoint):
    """The adapted server, discovered; an agent granted its pool. Returns (server, agent)."""
    pool = Pool.objects.create(name="files-pool")
    server = McpServer.objects.create(
        name="shared-files",
        transport="stdio",
        command="python",
        args=adapter_args(CONFIG, filesystem_bin, str(shared)),
    )
    configure(server, endpoint)
    discover(server)
    agent = Agent.objects.create(agent_id="office-agent", display_name="Office")
    agent.accessible_pools.set([pool])
    return server, agent


def test_a_plain_server_is_rejected_and_its_adapter_is_accepted_as_configured(
    files, filesystem_bin, shared
):
    server, _ = files
    plain = McpServer.objects.create(
        name="plain-files", transport="stdio", command=filesystem_bin, args=[str(shared)]
    )
    report = discover(plain)
    assert (report.accepted, report.rejected) == (0, 14)
    accepted = {m.name: m for m in server.mcplets.filter(status=Mcplet.Status.ACCEPTED)}
    assert sorted(accepted) == ["list_directory", "read_text_file", "search_files", "write_file"]
    assert not server.mcplets.exclude(status=Mcplet.Status.ACCEPTED).exists()
    write = accepted["write_file"]
    assert (write.mcplet_type, write.visibility) == ("action", ["app"])
    assert write.pool_name == "files-pool"
    assert (write.auth_enforcement, write.auth_prompt_message) == (
        "strict",
        "Write this file in the shared folder?",
    )
    read = accepted["read_text_file"]
    assert (read.mcplet_type, read.visibility, read.model_visible) == ("read", ["model"], True)
    assert read.input_schema["required"] == ["path"]  # the upstream's own schema


def test_the_model_reads_through_the_gateway(files, shared):
    _, agent = files
    assert "read_text_file" in {t.name for t in gateway.tools_for(agent)}
    assert "write_file" not in {t.name for t in gateway.tools_for(agent)}  # app only
    outcome = gateway.call_tool(agent, "read_text_file", {"path": str(shared / "menu.txt")})
    assert outcome.status == "executed", outcome.envelope
    assert outcome.envelope["result"] == {"content": "Tonight: ramen, gyoza\n"}
    outcome = gateway.call_tool(agent, "move_file", {"source": "a", "destination": "b"}, "app")
    assert outcome.status == "refused"  # not configured: the host does not even know it


def test_a_write_runs_only_after_the_passkey_and_the_adapters_verification(
    files, shared, approver_client, authenticator, eager
):
    _, agent = files
    note = shared / "note.txt"
    arguments = {"path": str(note), "content": "Closed on Monday"}
    held = gateway.call_tool(agent, "write_file", arguments, "app")
    assert held.status == "pending" and held.ceremony.enforcement == "strict"
    assert not note.exists()
    credential = sign(approver_client, held.ceremony, authenticator)
    assert post_assertion(approver_client, held.ceremony, credential).status_code == 200
    held.ceremony.refresh_from_db()
    assert held.ceremony.status == Ceremony.Status.EXECUTED, held.ceremony.result
    assert note.read_text() == "Closed on Monday"
    assert held.ceremony.result["_meta"]["toolId"] == "write_file"


def call_adapter(filesystem_bin, shared, env, *calls):
    """Call the adapter directly, as a client that got hold of an assertion would."""

    async def scenario():
        args = (CONFIG, filesystem_bin, str(shared))
        async with adapter_session(*args, env=env) as session:
            return [await session.call_tool(*call, meta=meta) for call, meta in calls]

    return anyio.run(scenario)


def test_a_replayed_or_rebound_assertion_reaches_nothing(
    files, shared, filesystem_bin, approver_client, authenticator
):
    server, agent = files
    note, elsewhere = shared / "note.txt", shared / "elsewhere.txt"
    arguments = {"path": str(note), "content": "Closed on Monday"}
    held = gateway.call_tool(agent, "write_file", arguments, "app").ceremony
    issued = time.monotonic()  # the challenge's record lives CHALLENGE_TTL (+ a grace) from here
    credential = sign(approver_client, held, authenticator)
    assert post_assertion(approver_client, held, credential).status_code == 200
    assertion = {"mcplet_auth": cache.get(held.assertion_key)}  # approved, not yet resumed
    assert assertion["mcplet_auth"]
    env = {k: server.env[k] for k in ("MCPLET_VERIFY_URL", "MCPLET_VERIFY_TOKEN")}
    rebound_args = {"path": str(elsewhere), "content": "Closed all week"}

    rebound, verified = call_adapter(
        filesystem_bin,
        shared,
        env,
        (("write_file", rebound_args), assertion),
        (("write_file", arguments), assertion),
    )
    assert rebound.structured_content["error"]["code"] == "AUTH_FAILED"
    assert "wrong_call" in rebound.structured_content["error"]["message"]
    assert not elsewhere.exists()
    assert not verified.is_error and note.read_text() == "Closed on Monday"

    note.unlink()
    (replayed,) = call_adapter(filesystem_bin, shared, env, (("write_file", arguments), assertion))
    assert replayed.structured_content["error"]["code"] == "AUTH_FAILED"
    reason = replayed.structured_content["error"]["message"]
    if time.monotonic() - issued < CHALLENGE_TTL:
        assert "already_used" in reason
    else:  # a slow machine: the challenge's window has passed, and its record may be gone
        assert "already_used" in reason or "unknown_challenge" in reason
    assert not note.exists()

    (bare,) = call_adapter(filesystem_bin, shared, env, (("write_file", arguments), None))
    (hidden,) = call_adapter(filesystem_bin, shared, env, (("move_file", {}), None))
    assert bare.structured_content["error"]["code"] == "AUTH_REQUIRED"
    assert hidden.structured_content["error"]["code"] == "NOT_FOUND"
    assert sorted(p.name for p in shared.iterdir()) == ["menu.txt"]


def test_the_upstream_never_gets_the_verify_token(files, shared, filesystem_bin, tmp_path):
    """The adapter keeps its credentials: the upstream is launched without them."""
    server, _ = files
    spy = tmp_path / "spy.sh"
    seen = tmp_path / "env.txt"
    spy.write_text(f'#!/bin/sh\nenv > {seen}\nexec "{filesystem_bin}" "$@"\n')
    spy.chmod(0o755)
    env = {k: server.env[k] for k in ("MCPLET_VERIFY_URL", "MCPLET_VERIFY_TOKEN")}

    async def scenario():
        async with adapter_session(CONFIG, str(spy), str(shared), env=env) as session:
            return await session.list_tools()

    assert len(anyio.run(scenario).tools) == 4
    text = seen.read_text()
    assert "MCPLET_VERIFY" not in text and env["MCPLET_VERIFY_TOKEN"] not in text


def test_a_suggested_draft_reaches_no_agent_until_its_pool_is_granted(
    filesystem_bin, shared, tmp_path
):
    """`--suggest` drafts every tool in a pool named after the server: registered as it is, the
    host rejects them (no such pool); once the pool exists, only an agent granted it reaches
    the drafted reads — never every agent, as a pool-less draft would let it."""
    draft = suggested_draft(tmp_path / "draft.yaml", filesystem_bin, str(shared))
    pools = {contract["pool"] for contract in yaml.safe_load(draft.read_text())["tools"].values()}
    assert pools == {"secure-filesystem-server-pool"}
    server = McpServer.objects.create(
        name="drafted-files",
        transport="stdio",
        command="python",
        args=adapter_args(draft, filesystem_bin, str(shared)),
    )
    report = discover(server)
    assert (report.accepted, report.rejected) == (0, 14)
    reason = server.mcplets.get(name="read_text_file").rejection_reason
    assert "'secure-filesystem-server-pool', which is not registered" in reason

    pool = Pool.objects.create(name="secure-filesystem-server-pool")
    assert discover(server).accepted == 14
    granted = Agent.objects.create(agent_id="office-agent", display_name="Office")
    granted.accessible_pools.set([pool])
    other = Agent.objects.create(agent_id="other-agent", display_name="Other")
    assert "read_text_file" in {t.name for t in gateway.tools_for(granted)}
    assert gateway.tools_for(other) == []
    refused = gateway.call_tool(other, "read_text_file", {"path": str(shared / "menu.txt")})
    assert refused.status == "refused"
    assert refused.envelope["error"]["code"] == "X_ACCESS_DENIED"
