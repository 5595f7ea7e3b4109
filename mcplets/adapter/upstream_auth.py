"""How the adapter reaches a streamable-HTTP upstream behind OAuth: as a confidential client of
the upstream's authorization server, with the client credentials grant (the SDK's
`ClientCredentialsOAuthProvider`), its credentials taken from the adapter's environment:

    MCPLET_ADAPTER_CLIENT_ID, MCPLET_ADAPTER_CLIENT_SECRET   the client, registered there
    MCPLET_ADAPTER_ISSUER     that authorization server's issuer: the secret goes nowhere else
    MCPLET_ADAPTER_SCOPE      the scopes to ask for (default: those the upstream advertises)

Without them the upstream is reached as before, and one that answers 401 is said to need them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import httpx2
from mcp.client.auth import OAuthFlowError
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

CLIENT_ID_ENV = "MCPLET_ADAPTER_CLIENT_ID"
CLIENT_SECRET_ENV = "MCPLET_ADAPTER_CLIENT_SECRET"  # noqa: S105 (a variable's name)
SCOPE_ENV = "MCPLET_ADAPTER_SCOPE"
ISSUER_ENV = "MCPLET_ADAPTER_ISSUER"
SECRET_ENV = (CLIENT_ID_ENV, CLIENT_SECRET_ENV)  # never passed on to a stdio upstream
# The SDK's own defaults for an MCP HTTP client: a response stream may stay open for long.
TIMEOUT = httpx2.Timeout(30.0, read=300.0)


@dataclass(frozen=True)
class Credentials:
    client_id: str
    client_secret: str
    scope: str | None = None
    issuer: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Credentials | None:
        client_id, secret = env.get(CLIENT_ID_ENV, ""), env.get(CLIENT_SECRET_ENV, "")
        if not client_id and not secret:
            return None
        if not (client_id and secret):
            raise ValueError(f"set both {CLIENT_ID_ENV} and {CLIENT_SECRET_ENV}, or neither")
        return cls(client_id, secret, env.get(SCOPE_ENV) or None, env.get(ISSUER_ENV) or None)


class MemoryTokenStorage:
    """The SDK's `TokenStorage`, for the adapter's lifetime (a new one asks for a new token)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class UpstreamHttp:
    """The HTTP client for the upstream at `url` (with the OAuth provider when there are
    credentials), which notes how the upstream last answered, to explain a refusal."""

    def __init__(self, url: str, credentials: Credentials | None) -> None:
        self.url = url
        self.credentials = credentials
        self.last_status: int | None = None
        self.challenge = ""

    def client(self) -> httpx2.AsyncClient:
        auth = None
        if self.credentials is not None:
            auth = ClientCredentialsOAuthProvider(
                server_url=self.url,
                storage=MemoryTokenStorage(),
                client_id=self.credentials.client_id,
                client_secret=self.credentials.client_secret,
                scope=self.credentials.scope,
                issuer=self.credentials.issuer,
            )
        return httpx2.AsyncClient(
            auth=auth, timeout=TIMEOUT, event_hooks={"response": [self._note]}
        )

    async def _note(self, response: httpx2.Response) -> None:
        # Every response, those of the OAuth flow included; only the MCP endpoint's count.
        if str(response.request.url) == self.url:
            self.last_status = response.status_code
            self.challenge = response.headers.get("www-authenticate", "")

    def refusal(self, error: BaseException) -> str | None:
        """What to tell the operator when connecting failed with `error` for want of
        authorization (None: it failed for another reason)."""
        oauth = next((e for e in causes(error) if isinstance(e, OAuthFlowError)), None)
        who = f"{CLIENT_ID_ENV}={self.credentials.client_id}" if self.credentials else ""
        if oauth is not None:
            return (
                f"the upstream server {self.url} could not be authorized with the adapter's "
                f"OAuth client credentials ({who}): {oauth}"
            )
        if self.last_status not in (401, 403):
            return None
        answer = f"answered HTTP {self.last_status} ({self.challenge or 'no challenge'})"
        if self.credentials is not None:
            return f"the upstream server {self.url} {answer} to the token got for {who}"
        return (
            f"the upstream server {self.url} {answer}: it is protected by OAuth. Give the "
            f"adapter a client of its authorization server that may use the client credentials "
            f"grant: set {CLIENT_ID_ENV} and {CLIENT_SECRET_ENV}, {ISSUER_ENV} (that server's "
            f"issuer) and, to ask for particular scopes, {SCOPE_ENV}"
        )


def causes(error: BaseException) -> Iterator[BaseException]:
    """`error`, the members of its groups, and their causes and contexts."""
    stack, seen = [error], set()
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)
