"""The MCP server behind OAuth (`mcplets.examples.oauth_protected`) through the SDK's own
OAuth client: discovery from the 401, dynamic registration, authorization code with PKCE,
the token on every request, a refresh once the access token has expired, and revocation."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import parse_qs, urlparse

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from mcplets.examples.oauth_protected import serve
from tests.conftest import Calls

pytestmark = pytest.mark.anyio

TOKEN_TTL = 2  # seconds: short, so one test can outlive an access token
REDIRECT_URI = "http://127.0.0.1:1/callback"  # never visited: the code is read off the redirect


@pytest.fixture(scope="module")
def server_calls(tmp_path_factory):
    return Calls(tmp_path_factory.mktemp("oauth") / "calls.jsonl")


@pytest.fixture(scope="module")
def base(server_calls):
    with serve(calls_log=server_calls.path, token_ttl=TOKEN_TTL) as url:
        yield url


class MemoryStorage:
    """The SDK's `TokenStorage`, in memory; it also counts the tokens the client was given."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None
        self.issued: list[OAuthToken] = []

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens
        self.issued.append(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class Browser:
    """Stands in for the user's browser: follows the authorization URL (the server approves
    at once and redirects) and hands the code and state on to the callback handler."""

    def __init__(self) -> None:
        self.visits = 0
        self.result: AuthorizationCodeResult | None = None

    async def redirect(self, authorization_url: str) -> None:
        self.visits += 1
        async with httpx.AsyncClient() as http:
            response = await http.get(authorization_url)
        assert response.status_code == 302, response.text
        query = parse_qs(urlparse(response.headers["location"]).query)
        # The RFC 9207 issuer too, as a real callback would: the SDK client checks it.
        self.result = AuthorizationCodeResult(
            code=query["code"][0], state=query["state"][0], iss=query.get("iss", [None])[0]
        )

    async def callback(self) -> AuthorizationCodeResult:
        assert self.result is not None
        return self.result


@asynccontextmanager
async def connect(
    base: str, storage: MemoryStorage, browser: Browser, client_metadata_url: str | None = None
) -> AsyncIterator[Client]:
    """The SDK's client, registering itself (or identified by its metadata document's URL)."""
    auth = OAuthClientProvider(
        server_url=f"{base}/mcp",
        client_metadata=OAuthClientMetadata(client_name="oauth-test", redirect_uris=[REDIRECT_URI]),
        storage=storage,
        redirect_handler=browser.redirect,
        callback_handler=browser.callback,
        client_metadata_url=client_metadata_url,
    )
    async with (
        httpx2.AsyncClient(auth=auth) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
    ):
        yield client


async def test_no_token_is_refused_with_where_to_find_the_authorization_server(base):
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    async with httpx.AsyncClient() as http:
        for headers in ({}, {"Authorization": "Bearer not-a-token"}):
            response = await http.post(f"{base}/mcp", json=initialize, headers=headers)
            assert response.status_code == 401
            challenge = response.headers["www-authenticate"]
            assert challenge.startswith("Bearer ")
            prm_url = f"{base}/.well-known/oauth-protected-resource/mcp"
            assert f'resource_metadata="{prm_url}"' in challenge
        prm = (await http.get(prm_url)).json()
        assert prm["resource"] == f"{base}/mcp"
        assert prm["authorization_servers"] == [base]
        asm = (await http.get(f"{base}/.well-known/oauth-authorization-server")).json()
    assert asm["issuer"] == base
    assert asm["code_challenge_methods_supported"] == ["S256"]
    assert asm["authorization_response_iss_parameter_supported"] is True  # RFC 9207
    # No pre-registered client, no client credentials grant; no metadata documents either.
    assert asm["grant_types_supported"] == ["authorization_code", "refresh_token"]
    assert "client_id_metadata_document_supported" not in asm
    for endpoint in ("authorization", "token", "registration", "revocation"):
        assert asm[f"{endpoint}_endpoint"].startswith(base)


async def test_the_sdk_client_authorizes_lists_and_calls(base, server_calls):
    storage, browser = MemoryStorage(), Browser()
    async with connect(base, storage, browser) as client:
        tools = (await client.list_tools()).tools
        result = await client.call_tool("whoami", {"echo": "hello"})
    assert [t.name for t in tools] == ["whoami"]
    assert tools[0].meta["mcpletType"] == "read"
    assert browser.visits == 1
    client_id = storage.client_info.client_id
    assert result.structured_content["result"]["subject"] == client_id
    # The server saw the call, made with this client's token.
    call = {"name": "whoami", "arguments": {"echo": "hello"}, "subject": client_id}
    assert call in server_calls()


async def test_an_expired_access_token_is_refreshed_by_the_client(base, server_calls):
    storage, browser = MemoryStorage(), Browser()
    async with connect(base, storage, browser) as client:
        await client.call_tool("whoami", {"echo": "before"})
        first = storage.tokens
        # Past the server's expiry too, which is up to a second later than the client's.
        await anyio.sleep(TOKEN_TTL + 1.2)
        async with httpx.AsyncClient() as http:
            expired = {"Authorization": f"Bearer {first.access_token}"}
            assert (await http.post(f"{base}/mcp", json={}, headers=expired)).status_code == 401
        await client.call_tool("whoami", {"echo": "after"})
    # A refresh, not a second authorization: one visit to /authorize, two token responses,
    # and the refresh token rotated.
    assert browser.visits == 1
    assert len(storage.issued) == 2
    assert storage.tokens.access_token != first.access_token
    assert storage.tokens.refresh_token != first.refresh_token
    client_id = storage.client_info.client_id
    call = {"name": "whoami", "arguments": {"echo": "after"}, "subject": client_id}
    assert call in server_calls()


async def test_a_revoked_token_is_refused(base):
    storage, browser = MemoryStorage(), Browser()
    async with connect(base, storage, browser) as client:
        await client.list_tools()
    info, access = storage.client_info, storage.tokens.access_token
    async with httpx.AsyncClient() as http:
        revoke = {"token": access, "client_id": info.client_id, "client_secret": info.client_secret}
        assert (await http.post(f"{base}/revoke", data=revoke)).status_code == 200
        bearer = {"Authorization": f"Bearer {access}"}
        assert (await http.post(f"{base}/mcp", json={}, headers=bearer)).status_code == 401
