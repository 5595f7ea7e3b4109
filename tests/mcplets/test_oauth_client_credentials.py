"""The OAuth-protected test server's client credentials grant (machine to machine), through the
SDK's `ClientCredentialsOAuthProvider` and `PrivateKeyJWTOAuthProvider` and at the token
endpoint itself: pre-registered confidential clients, either way of sending the secret or a
signed assertion, a token bound to the resource asked for, the client as the subject, no
refresh token."""

import base64
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import httpx2
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from mcp import Client
from mcp.client.auth import OAuthTokenError
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.streamable_http import streamable_http_client

from mcplets.examples.oauth_protected import serve
from tests.conftest import Calls
from tests.mcplets.test_oauth_protected import MemoryStorage

pytestmark = pytest.mark.anyio

CLIENTS = {"robot": "s3cret:with/odd chars", "other-robot": "another-secret"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def calls(tmp_path_factory):
    return Calls(tmp_path_factory.mktemp("oauth-cc") / "calls.jsonl")


@pytest.fixture(scope="module")
def signing_key(tmp_path_factory):
    """The private key of the client that signs its assertions (private_key_jwt); the server
    is given the public one."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = tmp_path_factory.mktemp("jwt-client") / "public.pem"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return private.decode(), public


@pytest.fixture(scope="module")
def base(calls, signing_key):
    jwt_clients = {"signed-robot": signing_key[1]}
    with serve(calls_log=calls.path, clients=CLIENTS, jwt_clients=jwt_clients) as url:
        yield url


@asynccontextmanager
async def machine(
    base: str, client_id: str, secret: str, method: str = "client_secret_basic"
) -> AsyncIterator[tuple[Client, MemoryStorage]]:
    storage = MemoryStorage()
    auth = ClientCredentialsOAuthProvider(
        server_url=f"{base}/mcp",
        storage=storage,
        client_id=client_id,
        client_secret=secret,
        token_endpoint_auth_method=method,
        issuer=base,
    )
    async with (
        httpx2.AsyncClient(auth=auth) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
    ):
        yield client, storage


async def token(base: str, **form: str) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.post(f"{base}/token", data={"grant_type": "client_credentials", **form})


async def mcp_status(base: str, access_token: str) -> int:
    bearer = {"Authorization": f"Bearer {access_token}", **MCP_HEADERS}
    async with httpx.AsyncClient() as http:
        return (await http.post(f"{base}/mcp", json=INITIALIZE, headers=bearer)).status_code


async def test_the_metadata_offers_the_grant(base):
    async with httpx.AsyncClient() as http:
        asm = (await http.get(f"{base}/.well-known/oauth-authorization-server")).json()
    assert asm["grant_types_supported"] == ["authorization_code", "refresh_token"] + [
        "client_credentials"
    ]
    assert set(asm["token_endpoint_auth_methods_supported"]) >= {
        "client_secret_basic",
        "client_secret_post",
        "private_key_jwt",
    }
    assert asm["token_endpoint_auth_signing_alg_values_supported"] == ["ES256", "RS256"]


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
async def test_the_sdk_client_lists_and_calls_as_itself(base, calls, method):
    echo = f"from {method}"
    async with machine(base, "robot", CLIENTS["robot"], method) as (client, storage):
        tools = (await client.list_tools()).tools
        result = await client.call_tool("whoami", {"echo": echo})
    assert [t.name for t in tools] == ["whoami"]
    assert result.structured_content["result"] == {
        "subject": "robot",
        "clientId": "robot",
        "echo": echo,
    }
    assert {"name": "whoami", "arguments": {"echo": echo}, "subject": "robot"} in calls()
    # One token, and no refresh token with it (RFC 6749 §4.4.3).
    assert len(storage.issued) == 1
    assert storage.tokens.refresh_token is None


async def test_either_method_at_the_token_endpoint_and_the_token_is_bound_to_its_resource(base):
    resource = f"{base}/mcp"
    posted = await token(base, client_id="robot", client_secret=CLIENTS["robot"], resource=resource)
    # client_secret_basic: both parts form-encoded before base64 (RFC 6749 §2.3.1).
    basic = base64.b64encode(b"robot:s3cret%3Awith%2Fodd+chars").decode()
    async with httpx.AsyncClient() as http:
        sent = await http.post(
            f"{base}/token",
            data={"grant_type": "client_credentials", "resource": resource},
            headers={"Authorization": f"Basic {basic}"},
        )
    for response in (posted, sent):
        assert response.status_code == 200, response.text
        assert response.headers["cache-control"] == "no-store"
        body = response.json()
        assert body["token_type"] == "Bearer"
        assert body["expires_in"] == 300
        assert "refresh_token" not in body
        assert await mcp_status(base, body["access_token"]) == 200

    # A token for no resource, or for another one, is no good here.
    unbound = await token(base, client_id="robot", client_secret=CLIENTS["robot"])
    assert unbound.status_code == 200
    assert await mcp_status(base, unbound.json()["access_token"]) == 401
    elsewhere = await token(
        base,
        client_id="robot",
        client_secret=CLIENTS["robot"],
        resource="http://127.0.0.1:1/mcp",
    )
    assert elsewhere.status_code == 400
    assert elsewhere.json()["error"] == "invalid_target"


async def test_a_wrong_secret_gets_no_token(base, calls):
    wrong = await token(base, client_id="robot", client_secret="guess", resource=f"{base}/mcp")
    assert wrong.status_code == 401
    assert wrong.json()["error"] == "invalid_client"
    # Another client's secret is as wrong.
    swapped = await token(base, client_id="robot", client_secret=CLIENTS["other-robot"])
    assert swapped.status_code == 401
    basic = base64.b64encode(b"robot:guess").decode()
    async with httpx.AsyncClient() as http:
        challenged = await http.post(
            f"{base}/token",
            data={"grant_type": "client_credentials"},
            headers={"Authorization": f"Basic {basic}"},
        )
    assert challenged.status_code == 401
    assert challenged.headers["www-authenticate"].startswith("Basic ")

    echo = "with a wrong secret"
    with pytest.raises(BaseException) as raised:  # noqa: B017 (checked below)
        async with machine(base, "robot", "guess") as (client, _):
            await client.call_tool("whoami", {"echo": echo})
    assert any(isinstance(e, OAuthTokenError) for e in walk(raised.value))
    assert not [c for c in calls() if c["arguments"] == {"echo": echo}]


async def test_dynamically_registered_clients_cannot_use_the_grant(base):
    async with httpx.AsyncClient() as http:
        registered = await http.post(
            f"{base}/register",
            json={"redirect_uris": ["http://127.0.0.1:1/callback"], "client_name": "dcr"},
        )
    client = registered.json()
    refused = await token(
        base, client_id=client["client_id"], client_secret=client["client_secret"]
    )
    assert refused.status_code == 401
    assert refused.json()["error"] == "invalid_client"


def signer(private_key: str, client_id: str = "signed-robot"):
    return SignedJWTParameters(
        issuer=client_id, subject=client_id, signing_key=private_key, signing_algorithm="ES256"
    ).create_assertion_provider()


async def test_a_client_signing_its_assertions_private_key_jwt(base, calls, signing_key):
    storage = MemoryStorage()
    auth = PrivateKeyJWTOAuthProvider(
        server_url=f"{base}/mcp",
        storage=storage,
        client_id="signed-robot",
        assertion_provider=signer(signing_key[0]),
        issuer=base,
    )
    async with (
        httpx2.AsyncClient(auth=auth) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
    ):
        result = await client.call_tool("whoami", {"echo": "signed"})
    assert result.structured_content["result"]["subject"] == "signed-robot"
    assert {"name": "whoami", "arguments": {"echo": "signed"}, "subject": "signed-robot"} in calls()
    assert storage.tokens.refresh_token is None


async def test_an_assertion_is_good_once_and_only_with_the_clients_key(base, signing_key):
    jwt_bearer = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

    async def with_assertion(assertion):
        return await token(
            base,
            client_assertion_type=jwt_bearer,
            client_assertion=assertion,
            resource=f"{base}/mcp",
        )

    assertion = await signer(signing_key[0])(base)
    assert (await with_assertion(assertion)).status_code == 200
    replayed = await with_assertion(assertion)
    assert replayed.status_code == 401 and replayed.json()["error"] == "invalid_client"
    another_key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    forged = await signer(another_key.decode())(base)
    assert (await with_assertion(forged)).status_code == 401
    elsewhere = await signer(signing_key[0])("http://127.0.0.1:1")  # for another server
    assert (await with_assertion(elsewhere)).status_code == 401
    stranger = await signer(signing_key[0], client_id="robot")(base)  # not a key client
    assert (await with_assertion(stranger)).status_code == 401


def walk(error: BaseException) -> Iterator[BaseException]:
    """`error`, its groups' members, and their causes and contexts."""
    stack = [error]
    while stack:
        current = stack.pop()
        yield current
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)
