"""An MCPlet behind OAuth 2.1: a test server for remote MCP servers that need a token.

    python -m mcplets.examples.oauth_protected [--port 8768] [--token-ttl 300]
        [--calls-log calls.jsonl]

One streamable-HTTP process is both the resource server and its authorization server, all
from the SDK's server-side auth: `/mcp` (one `whoami` tool) answers 401 with
`WWW-Authenticate: Bearer ..., resource_metadata="..."` without a valid token; the Protected
Resource Metadata (RFC 9728) is at `/.well-known/oauth-protected-resource/mcp`, the
authorization server metadata (RFC 8414) at `/.well-known/oauth-authorization-server`, and
`/register`, `/authorize`, `/token`, `/revoke` are the SDK's routes over an in-memory
provider. `/authorize` approves at once (a test drives it): it redirects straight back to the
client with a code. Access tokens live `--token-ttl` seconds and are bound to `/mcp` (RFC 8707).

`serve` runs it in a child process for tests and yields its base URL.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    OAuthAuthorizationServerProvider,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from mcplets import register_model_tool, serving

CODE_TTL = 300  # seconds an authorization code may wait for its exchange


class MemoryAuthorizationServer(
    OAuthAuthorizationServerProvider[AuthorizationCode, RefreshToken, AccessToken]
):
    """Clients, codes and tokens kept in memory; every authorization request is approved."""

    def __init__(self, token_ttl: int) -> None:
        self.token_ttl = token_ttl
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access_tokens: dict[str, AccessToken] = {}
        self.refresh_tokens: dict[str, RefreshToken] = {}
        self.pairs: dict[str, str] = {}  # access <-> refresh token, both ways, for revocation

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None  # the SDK's /register mints it
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        # No consent page: the client itself is the resource owner (its id is the subject).
        code = AuthorizationCode(
            code=secrets.token_urlsafe(32),
            scopes=params.scopes or [],
            expires_at=time.time() + CODE_TTL,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=client.client_id,
        )
        self.codes[code.code] = code
        return construct_redirect_uri(str(params.redirect_uri), code=code.code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        return code if code is not None and code.client_id == client.client_id else None

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]  # single use
        return self._issue(authorization_code)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        token = self.refresh_tokens.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        # Rotation: the old pair dies with the exchange.
        await self.revoke_token(refresh_token)
        return self._issue(refresh_token.model_copy(update={"scopes": scopes}))

    async def load_access_token(self, token: str) -> AccessToken | None:
        return self.access_tokens.get(token)  # the bearer middleware checks expires_at

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        partner = self.pairs.pop(token.token, None)
        for value in (token.token, partner):
            if value is not None:
                self.access_tokens.pop(value, None)
                self.refresh_tokens.pop(value, None)
                self.pairs.pop(value, None)

    def _issue(self, grant: AuthorizationCode | RefreshToken) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        granted = {
            "client_id": grant.client_id,
            "scopes": grant.scopes,
            "resource": grant.resource,
            "subject": grant.subject,
        }
        # Whole seconds (the SDK's AccessToken): the bearer middleware refuses it once
        # int(now) > expires_at, up to a second after the client's own clock has expired it.
        expires_at = int(time.time() + self.token_ttl)
        self.access_tokens[access] = AccessToken(token=access, expires_at=expires_at, **granted)
        self.refresh_tokens[refresh] = RefreshToken(token=refresh, **granted)
        self.pairs[access], self.pairs[refresh] = refresh, access
        return OAuthToken(
            access_token=access,
            expires_in=self.token_ttl,
            scope=" ".join(grant.scopes) or None,
            refresh_token=refresh,
        )


def build(base_url: str, token_ttl: int = 300, calls_log: Path | None = None) -> MCPServer:
    """The protected server as reached at `base_url` (its issuer; `/mcp` is the resource)."""
    base_url = base_url.rstrip("/")
    auth = AuthSettings(
        issuer_url=base_url,
        resource_server_url=f"{base_url}/mcp",
        # Tokens carry the RFC 8707 resource they were issued for: refuse any other audience.
        validate_token_resource=True,
        client_registration_options=ClientRegistrationOptions(enabled=True),
        revocation_options=RevocationOptions(enabled=True),
    )
    server = MCPServer(
        "oauth-protected", auth=auth, auth_server_provider=MemoryAuthorizationServer(token_ttl)
    )

    def whoami(echo: str = "") -> dict[str, Any]:
        token = get_access_token()  # set by the SDK's bearer middleware for this request
        assert token is not None  # /mcp is not reached without one
        subject = token.subject or token.client_id
        if calls_log is not None:
            with calls_log.open("a", encoding="utf-8") as file:
                entry = {"name": "whoami", "arguments": {"echo": echo}, "subject": subject}
                file.write(json.dumps(entry) + "\n")
        return {"subject": subject, "clientId": token.client_id, "echo": echo}

    register_model_tool(
        server,
        "whoami",
        whoami,
        mcplet_type="read",
        description="Who the caller's access token says it is (and an optional echo)",
    )
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8768)
    parser.add_argument("--token-ttl", type=int, default=300, help="access token lifetime (s)")
    parser.add_argument("--calls-log", type=Path)
    parser.add_argument("--base-url", help="where clients reach it (default: this host and port)")
    args = parser.parse_args(argv)
    base_url = args.base_url or f"http://{args.host}:{args.port}"
    server = build(base_url, args.token_ttl, args.calls_log)
    server.run("streamable-http", host=args.host, port=args.port)


@contextlib.contextmanager
def serve(
    calls_log: Path | None = None, token_ttl: int = 300, timeout: float = 20
) -> Iterator[str]:
    """Run the server in a child process on a free port; yield its base URL (`/mcp` is the
    MCP endpoint, and the base URL is the authorization server's issuer)."""
    port = serving.free_port()
    command = [sys.executable, "-m", "mcplets.examples.oauth_protected", "--port", str(port)]
    command += ["--token-ttl", str(token_ttl)]
    if calls_log is not None:
        command += ["--calls-log", str(Path(calls_log).resolve())]
    with serving.listening(command, port, timeout):
        yield f"http://127.0.0.1:{port}"


if __name__ == "__main__":
    main()
