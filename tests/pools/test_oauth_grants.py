"""A server behind OAuth, connected the way admin does it (the SDK's authorization-code flow
against our OAuth-protected test server): discovery and calls carry the grant's token, tokens
are refreshed before they lapse, a refused refresh says "needs reconnecting" and the call
fails as unavailable (never outcome-unknown), and no token is readable at rest."""

import subprocess
import sys
import time

import pytest
from django.core.management import call_command
from django.db import connection

from agents.models import Agent
from mcplet_host import gateway
from mcplet_host.models import AuditEvent
from mcplets.examples.oauth_protected import serve
from pools.discovery import discover
from pools.mcp_client import ServerUnreachable
from pools.models import McpServer
from pools.oauth.models import OAuthGrant
from tests.conftest import Calls
from tests.pools.oauth_helpers import connect_server
from tests.processes import ROOT, environment

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def calls(tmp_path):
    return Calls(tmp_path / "calls.jsonl")


def register(base):
    return McpServer.objects.create(
        name="tracker", transport="http", url=f"{base}/mcp", auth=McpServer.Auth.OAUTH
    )


def test_a_server_not_connected_says_so_and_nothing_runs(calls):
    with serve(calls_log=calls.path) as base:
        server = register(base)
        with pytest.raises(ServerUnreachable, match="needs OAuth and is not connected"):
            discover(server, timeout=10)
    assert calls() == []


def test_connect_then_discover_and_call_with_the_grant(calls):
    with serve(calls_log=calls.path) as base:
        server = register(base)
        outcome = connect_server(server)
        assert outcome["ok"], outcome
        assert outcome["message"].startswith(f"Connected tracker: tokens issued by {base}")
        grant = OAuthGrant.objects.get(server=server)
        assert (grant.status, grant.issuer.rstrip("/"), grant.resource) == (
            "connected",
            base,
            f"{base}/mcp",
        )
        assert grant.connected_by == "operator" and grant.expires_at is not None
        server.refresh_from_db()
        assert server.mcplets.get().name == "whoami"  # the flow discovered the tools

        agent = Agent.objects.create(agent_id="reader", display_name="Reader")
        done = gateway.call_tool(agent, "whoami", {"echo": "hi"})
        assert done.status == "executed", done.envelope
        (call,) = calls("whoami")
        assert call["subject"] == grant.client_id  # the test server's subject: the client

        connected = AuditEvent.objects.get(event_type="server.oauth.connected")
        assert connected.details["issuer"] == grant.issuer
        secrets = [grant.access_token, grant.refresh_token, grant.secret["client"]["client_secret"]]
        assert all(secrets)
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM pools_oauthgrant")
            row = repr(cursor.fetchall())
        audit = repr(list(AuditEvent.objects.values()))
        for secret in secrets:
            assert secret not in row and secret not in audit


def test_a_token_about_to_lapse_is_refreshed_and_the_call_goes_through(calls):
    with serve(calls_log=calls.path, token_ttl=4) as base:
        server = register(base)
        assert connect_server(server)["ok"]
        first = OAuthGrant.objects.get(server=server)
        time.sleep(max(0, (first.refresh_after.timestamp() - time.time())) + 0.2)
        agent = Agent.objects.create(agent_id="reader", display_name="Reader")
        assert gateway.call_tool(agent, "whoami", {}).status == "executed"
        grant = OAuthGrant.objects.get(server=server)
        assert grant.refreshed_at is not None
        assert grant.access_token != first.access_token
        assert grant.refresh_token != first.refresh_token  # the server rotates them
        assert len(calls("whoami")) == 1


def test_a_revoked_grant_needs_reconnecting_and_calls_fail_as_unavailable(calls, tmp_path):
    with serve(calls_log=calls.path, token_ttl=4) as base:
        server = register(base)
        assert connect_server(server)["ok"]
        agent = Agent.objects.create(agent_id="reader", display_name="Reader")
        assert gateway.call_tool(agent, "whoami", {}).status == "executed"  # a session is held
        grant = OAuthGrant.objects.get(server=server)
        # What a revocation at the authorization server leaves: a refresh token it refuses.
        grant.secret = {**grant.secret, "tokens": {**grant.secret["tokens"], "refresh_token": "x"}}
        grant.save()
        time.sleep(max(0, (grant.refresh_after.timestamp() - time.time())) + 0.2)
        refused = gateway.call_tool(agent, "whoami", {})
        error = refused.envelope["error"]
        assert error["code"] == "SERVICE_UNAVAILABLE", error
        assert "needs reconnecting" in error["message"]
        assert "refused the token refresh" in error["message"]
        grant.refresh_from_db()
        assert grant.status == OAuthGrant.Status.NEEDS_RECONNECTING
        event = AuditEvent.objects.get(event_type="server.oauth.refresh_failed")
        assert event.result == "FAILURE" and event.target_server == "tracker"
    assert len(calls("whoami")) == 1  # the call before; none after


def test_the_database_dump_holds_no_token(calls, tmp_path):
    with serve(calls_log=calls.path) as base:
        server = register(base)
        assert connect_server(server)["ok"]
    grant = OAuthGrant.objects.get(server=server)
    dump = tmp_path / "dump.json"
    call_command("dumpdata", "pools", output=str(dump))
    text = dump.read_text()
    assert "pools.oauthgrant" in text
    assert grant.access_token not in text and grant.refresh_token not in text


REFRESHER = """
import sys, time
from pools.models import McpServer
from pools.oauth.tokens import access_token
server = McpServer.objects.get(name="tracker")
while time.time() < {at}:  # both processes ask at the same moment
    time.sleep(0.005)
print(access_token(server), flush=True)
"""


@pytest.mark.services
def test_two_workers_refresh_once(calls):
    """Rotation makes a refresh token good once: had both processes refreshed, the second
    would have been refused and the grant lost."""
    with serve(calls_log=calls.path, token_ttl=4) as base:
        server = register(base)
        assert connect_server(server)["ok"]
        first = OAuthGrant.objects.get(server=server)
        at = first.refresh_after.timestamp() + 2.0  # after the processes have started
        command = [sys.executable, "manage.py", "shell", "--no-imports", "-c"]
        command.append(REFRESHER.format(at=at))
        processes = [
            subprocess.Popen(
                command, cwd=ROOT, env=environment(), stdout=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        tokens = [p.communicate(timeout=60)[0].strip() for p in processes]
        grant = OAuthGrant.objects.get(server=server)
        assert grant.status == OAuthGrant.Status.CONNECTED, grant.problem
        assert tokens == [grant.access_token] * 2
        assert grant.access_token != first.access_token
