"""The OAuth-protected test server's options, through the SDK's own clients: the RFC 9207
issuer on authorization responses (and a wrong one, which the client refuses), revoking every
token at once, and scopes (advertised, defaulted, and one that `whoami` requires, which a
client gets by stepping up)."""

import base64
import hashlib
import secrets
from urllib.parse import parse_qs, urlencode, urlparse

import httpx
import pytest

from mcplets.examples.oauth_protected import serve
from tests.conftest import Calls
from tests.mcplets.test_oauth_client_credentials import (
    INITIALIZE,
    MCP_HEADERS,
    machine,
    token,
    walk,
)
from tests.mcplets.test_oauth_client_credentials import mcp_status as status
from tests.mcplets.test_oauth_protected import REDIRECT_URI, Browser, MemoryStorage, connect

pytestmark = pytest.mark.anyio

CLIENTS = {"robot": "robot-secret"}


@pytest.fixture
def calls(tmp_path):
    return Calls(tmp_path / "calls.jsonl")


async def register(base: str) -> dict:
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{base}/register", json={"redirect_uris": [REDIRECT_URI]})
    assert response.status_code == 201, response.text
    return response.json()


async def robot_token(base: str, **form: str) -> dict:
    response = await token(base, client_id="robot", client_secret="robot-secret", **form)
    assert response.status_code == 200, response.text
    return response.json()


async def authorize(base: str, client_id: str, **extra: str) -> dict[str, str]:
    """The query the server redirects back with (the user's browser, by hand)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT_URI,
        "code_challenge": challenge.decode().rstrip("="),
        "code_challenge_method": "S256",
        "state": "the-state",
        **extra,
    }
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{base}/authorize?{urlencode(query)}")
    assert response.status_code == 302, response.text
    location = urlparse(response.headers["location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == REDIRECT_URI
    return {k: v[0] for k, v in parse_qs(location.query).items()}


async def test_every_authorization_response_names_the_issuer(tmp_path):
    with serve() as base:
        client = await register(base)
        granted = await authorize(base, client["client_id"])
        # A scope the client did not register with: an error, redirected, with the issuer too.
        refused = await authorize(base, client["client_id"], scope="nothing-like-it")
    assert granted["iss"] == base
    assert granted["state"] == "the-state" and granted["code"]
    assert refused["iss"] == base
    assert refused["error"] == "invalid_scope"


async def test_a_wrong_issuer_is_refused_by_the_sdk_client(calls):
    with serve(calls_log=calls.path, wrong_iss=True) as base:
        client = await register(base)
        assert (await authorize(base, client["client_id"]))["iss"] == f"{base}/another-issuer"
        storage, browser = MemoryStorage(), Browser()
        with pytest.raises(BaseException) as raised:  # noqa: B017 (checked below)
            async with connect(base, storage, browser) as session:
                await session.call_tool("whoami", {"echo": "mixed up"})
    assert browser.visits == 1  # it went to authorize, and came back with the wrong issuer
    messages = [str(e) for e in walk(raised.value)]
    assert any("iss mismatch" in m for m in messages), messages
    assert storage.tokens is None  # the code was never exchanged
    assert calls() == []


async def test_revoke_all_ends_every_grant(calls):
    with serve(calls_log=calls.path, clients=CLIENTS, testing_routes=True) as base:
        storage, browser = MemoryStorage(), Browser()
        async with connect(base, storage, browser) as session:
            await session.call_tool("whoami", {"echo": "before"})
            first = storage.tokens
            machine_token = (await robot_token(base, resource=f"{base}/mcp"))["access_token"]
            assert await status(base, machine_token) == 200
            async with httpx.AsyncClient() as http:
                revoked = await http.post(f"{base}/testing/revoke-all")
                assert revoked.status_code == 204
                for access in (first.access_token, machine_token):
                    assert await status(base, access) == 401
                refresh = {
                    "grant_type": "refresh_token",
                    "refresh_token": first.refresh_token,
                    "client_id": storage.client_info.client_id,
                    "client_secret": storage.client_info.client_secret,
                }
                refused = await http.post(f"{base}/token", data=refresh)
                assert refused.status_code == 400
                assert refused.json()["error"] == "invalid_grant"
            # The SDK client meets the 401 and authorizes again (the registration stands).
            await session.call_tool("whoami", {"echo": "after"})
        assert browser.visits == 2
        assert storage.tokens.access_token != first.access_token
    assert [c["arguments"]["echo"] for c in calls("whoami")] == ["before", "after"]


async def test_the_testing_route_is_off_by_default():
    with serve() as base:
        async with httpx.AsyncClient() as http:
            assert (await http.post(f"{base}/testing/revoke-all")).status_code == 404


async def test_scopes_are_advertised_and_granted_by_default():
    with serve(scopes="read write", clients=CLIENTS) as base:
        async with httpx.AsyncClient() as http:
            prm = (await http.get(f"{base}/.well-known/oauth-protected-resource/mcp")).json()
            asm = (await http.get(f"{base}/.well-known/oauth-authorization-server")).json()
        client = await register(base)  # asking for no scope
        resource = f"{base}/mcp"
        default = await token(base, client_id="robot", client_secret="robot-secret")
        narrow = await token(
            base, client_id="robot", client_secret="robot-secret", scope="read", resource=resource
        )
        unknown = await token(base, client_id="robot", client_secret="robot-secret", scope="admin")
    assert prm["scopes_supported"] == asm["scopes_supported"] == ["read", "write"]
    assert client["scope"] == "read write"
    assert default.json()["scope"] == "read write"
    assert narrow.json()["scope"] == "read"
    assert unknown.status_code == 400 and unknown.json()["error"] == "invalid_scope"


async def test_a_required_scope_is_asked_for_with_a_403(calls):
    with serve(
        calls_log=calls.path, scopes="read", required_scope="admin", clients=CLIENTS
    ) as base:
        async with httpx.AsyncClient() as http:
            prm = (await http.get(f"{base}/.well-known/oauth-protected-resource/mcp")).json()
            asm = (await http.get(f"{base}/.well-known/oauth-authorization-server")).json()
        resource = f"{base}/mcp"
        reader = await robot_token(base, resource=resource)
        admin = await robot_token(base, resource=resource, scope="read admin")
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "whoami", "arguments": {}},
        }
        async with httpx.AsyncClient() as http:
            as_reader = {"Authorization": f"Bearer {reader['access_token']}", **MCP_HEADERS}
            as_admin = {"Authorization": f"Bearer {admin['access_token']}", **MCP_HEADERS}
            opened = await http.post(resource, json=INITIALIZE, headers=as_reader)
            forbidden = await http.post(resource, json=call, headers=as_reader)
            allowed = await http.post(resource, json=call, headers=as_admin)
    assert prm["scopes_supported"] == ["read"]  # so a client starts without it
    assert asm["scopes_supported"] == ["read", "admin"]
    assert reader["scope"] == "read"
    assert opened.status_code == 200  # only whoami needs it
    assert forbidden.status_code == 403
    challenge = forbidden.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="insufficient_scope", scope="admin", ')
    assert f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"' in challenge
    # Past the scope check (no session was opened for this bare call, hence not a 200).
    assert allowed.status_code != 403
    assert calls() == []


@pytest.mark.parametrize("flow", ["authorization_code", "client_credentials"])
async def test_the_sdk_clients_step_up_to_the_required_scope(calls, flow):
    with serve(
        calls_log=calls.path, scopes="read", required_scope="admin", clients=CLIENTS
    ) as base:
        storage, browser = MemoryStorage(), Browser()

        async def list_and_call(client):
            await client.list_tools()  # no whoami: no need of the scope yet
            return storage.tokens.scope, await client.call_tool("whoami", {"echo": flow})

        if flow == "authorization_code":
            async with connect(base, storage, browser) as client:
                before, result = await list_and_call(client)
        else:
            async with machine(base, "robot", "robot-secret") as (client, storage):
                before, result = await list_and_call(client)
    assert before == "read"
    assert storage.tokens.scope.split() == ["read", "admin"]
    assert len(storage.issued) == 2
    if flow == "authorization_code":
        assert browser.visits == 2  # the user is asked again, for the wider scope
    subject = result.structured_content["result"]["subject"]
    assert calls() == [{"name": "whoami", "arguments": {"echo": flow}, "subject": subject}]
