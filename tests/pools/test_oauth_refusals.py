"""What can go wrong with a server behind OAuth, each shown against our SDK-built test server,
with its calls log proving nothing ran: a wrong `iss` on the authorization response, a grant
revoked while a session is held, a scope the grant lacks (and the reconnect that grants it),
and client credentials, right and wrong."""

import httpx
import pytest
from django.core.exceptions import ValidationError

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

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def calls(tmp_path):
    return Calls(tmp_path / "calls.jsonl")


@pytest.fixture
def agent():
    return Agent.objects.create(agent_id="reader", display_name="Reader")


def register(base, **fields):
    fields.setdefault("auth", McpServer.Auth.OAUTH)
    return McpServer.objects.create(name="tracker", transport="http", url=f"{base}/mcp", **fields)


def test_an_authorization_response_from_another_issuer_is_refused(calls):
    with serve(calls_log=calls.path, wrong_iss=True) as base:
        server = register(base)
        outcome = connect_server(server)
    assert not outcome["ok"]
    assert outcome["message"].startswith("Not connected: ")
    assert "iss" in outcome["message"].lower()
    assert not OAuthGrant.objects.exists()
    assert calls() == []


def test_a_grant_revoked_while_a_session_is_held_needs_reconnecting(calls, agent):
    with serve(calls_log=calls.path, testing_routes=True) as base:
        server = register(base)
        assert connect_server(server)["ok"]
        assert gateway.call_tool(agent, "whoami", {}).status == "executed"
        assert httpx.post(f"{base}/testing/revoke-all").status_code == 204
        refused = gateway.call_tool(agent, "whoami", {"echo": "after"})
    error = refused.envelope["error"]
    assert error["code"] == "SERVICE_UNAVAILABLE", error  # not outcome-unknown: it did not run
    assert "needs reconnecting" in error["message"]
    grant = OAuthGrant.objects.get(server=server)
    assert grant.status == OAuthGrant.Status.NEEDS_RECONNECTING
    assert "refused the token refresh" in grant.problem
    assert AuditEvent.objects.filter(event_type="server.oauth.refresh_failed").count() == 1
    assert [c["arguments"] for c in calls("whoami")] == [{"echo": ""}]


def test_a_scope_the_grant_lacks_is_told_and_a_reconnect_asks_for_it(calls, agent):
    with serve(calls_log=calls.path, scopes="read", required_scope="admin") as base:
        server = register(base)
        assert connect_server(server)["ok"]
        assert OAuthGrant.objects.get(server=server).scopes == "read"
        refused = gateway.call_tool(agent, "whoami", {})
        error = refused.envelope["error"]
        assert error["code"] == "SERVICE_UNAVAILABLE", error
        assert "asks for the scopes admin (insufficient_scope)" in error["message"]
        grant = OAuthGrant.objects.get(server=server)
        assert (grant.asked_scopes, grant.usable) == ("admin", True)
        (event,) = AuditEvent.objects.filter(event_type="server.oauth.insufficient_scope")
        assert event.details["asked"] == "admin" and event.details["scopes"] == "read"
        assert calls("whoami") == []

        assert connect_server(server)["ok"]  # the operator reconnects
        grant = OAuthGrant.objects.get(server=server)
        assert set(grant.scopes.split()) == {"read", "admin"}
        assert (grant.asked_scopes, grant.problem) == ("", "")
        assert gateway.call_tool(agent, "whoami", {}).status == "executed"
    assert len(calls("whoami")) == 1


def test_client_credentials_reach_the_server_as_the_host(calls, agent):
    with serve(calls_log=calls.path, clients={"mcplet-host": "cs-right"}) as base:
        server = register(
            base,
            auth=McpServer.Auth.CLIENT_CREDENTIALS,
            oauth_client_id="mcplet-host",
            oauth_client_secret="cs-right",
            oauth_issuer=base,
        )
        assert discover(server, timeout=10).accepted == 1
        assert gateway.call_tool(agent, "whoami", {}).status == "executed"
        assert calls("whoami")[0]["subject"] == "mcplet-host"

        server.oauth_client_secret = "cs-wrong"
        server.save()
        with pytest.raises(ServerUnreachable) as refused:
            discover(server, timeout=10)
    assert "cs-wrong" not in str(refused.value)
    assert "its authorization server refused the host: Token exchange failed (401)" in str(
        refused.value
    )
    assert "invalid_client" in str(refused.value)
    assert len(calls("whoami")) == 1


def test_a_private_key_signs_the_hosts_assertions(calls, agent, tmp_path):
    """private_key_jwt (RFC 7523): the client secret field holds the host's key in PEM."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "host.pem").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    with serve(calls_log=calls.path, jwt_clients={"signed-host": tmp_path / "host.pem"}) as base:
        server = register(
            base,
            auth=McpServer.Auth.CLIENT_CREDENTIALS,
            oauth_client_id="signed-host",
            oauth_client_secret=private,
            oauth_issuer=base,
        )
        server.full_clean()
        assert discover(server, timeout=10).accepted == 1
        assert gateway.call_tool(agent, "whoami", {}).status == "executed"
    assert calls("whoami")[0]["subject"] == "signed-host"
    server.oauth_client_secret = "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----"
    with pytest.raises(ValidationError, match="the private key cannot be read"):
        server.full_clean()


@pytest.mark.parametrize(
    ("auth", "told"),
    [
        ("none", "Choose OAuth as its authentication"),
        ("client_credentials", "it refuses the host's OAuth token"),
        ("oauth", "it refuses the host's OAuth token"),
    ],
)
def test_a_401_tells_the_operator_what_to_do_for_the_servers_authentication(auth, told):
    """A server already on OAuth that refuses the host's token (one for another audience) is
    not told to choose OAuth."""
    import httpx2

    from pools.mcp_client import ServerConfig, _http_problem

    url = "https://tracker.example/mcp"
    challenge = 'Bearer resource_metadata="https://tracker.example/.well-known/x"'
    refused = httpx2.Response(401, headers={"WWW-Authenticate": challenge})
    config = ServerConfig(id=1, name="tracker", transport="http", url=url, auth=auth)
    assert told in _http_problem(config, [refused], RuntimeError("closed"))


def test_an_authorization_servers_malformed_answer_is_told_in_one_line():
    """The SDK's error for a token response it cannot read is pydantic's, over many lines, and
    quotes the response (a token in it): the host tells its first line."""
    from mcp.client.auth import OAuthTokenError

    from pools.mcp_client import _oauth_refusal

    said = "Invalid token response: 1 validation error for OAuthToken\nexpires_in\n  Input "
    said += "should be a valid integer [input_value='LEAKME…', input_type=str]\n    For further"
    assert (
        _oauth_refusal(OAuthTokenError(said))
        == "Invalid token response: 1 validation error for OAuthToken"
    )
    assert _oauth_refusal(RuntimeError(said)) is None
