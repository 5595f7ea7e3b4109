"""The in-memory authorization server behind `mcplets.examples.oauth_protected`, on the SDK's
provider interface: dynamically registered clients, pre-registered confidential clients for the
client credentials grant, and clients identified by the URL of their metadata document (CIMD).
Every authorization request is approved at once."""

from __future__ import annotations

import hmac
import logging
import secrets
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import jwt
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    OAuthAuthorizationServerProvider,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import ValidationError

logger = logging.getLogger(__name__)

CODE_TTL = 300  # seconds an authorization code may wait for its exchange
JWT_ALGORITHMS = ["ES256", "RS256"]
# CIMD documents must not name a shared-secret method: the client is public.
SECRET_METHODS = {"client_secret_post", "client_secret_basic", "client_secret_jwt"}


@dataclass(frozen=True)
class Settings:
    """What the command line (or `serve`) chose; `issuer` is the base URL, `resource` its /mcp."""

    issuer: str
    resource: str
    token_ttl: int = 300
    clients: Mapping[str, str] = field(default_factory=dict)  # client id -> secret
    jwt_clients: Mapping[str, str] = field(default_factory=dict)  # client id -> public key file
    scopes: tuple[str, ...] = ()
    required_scope: str | None = None
    wrong_iss: bool = False
    testing_routes: bool = False
    cimd: bool = False
    cimd_ca: str | None = None  # a CA bundle to trust when fetching metadata documents

    @property
    def valid_scopes(self) -> list[str]:
        """Every scope this server grants: the advertised ones and the required one."""
        extra = [self.required_scope] if self.required_scope else []
        return list(dict.fromkeys([*self.scopes, *extra]))


def same_resource(a: str, b: str) -> bool:
    return a.removesuffix("/") == b.removesuffix("/")


class MemoryAuthorizationServer(
    OAuthAuthorizationServerProvider[AuthorizationCode, RefreshToken, AccessToken]
):
    """Clients, codes and tokens kept in memory; every authorization request is approved."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.token_ttl = settings.token_ttl
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access_tokens: dict[str, AccessToken] = {}
        self.refresh_tokens: dict[str, RefreshToken] = {}
        self.pairs: dict[str, str] = {}  # access <-> refresh token, both ways, for revocation
        self.jwt_keys = {
            client_id: Path(path).read_text(encoding="utf-8")
            for client_id, path in settings.jwt_clients.items()
        }
        self.used_assertions: set[str] = set()  # their `jti`: each assertion is good once
        for client_id, secret in settings.clients.items():
            # Known to the SDK's routes too, so that /revoke authenticates them.
            self.clients[client_id] = OAuthClientInformationFull(
                client_id=client_id,
                client_secret=secret,
                token_endpoint_auth_method="client_secret_basic",  # noqa: S106 (a method)
                grant_types=["client_credentials"],
                scope=" ".join(settings.valid_scopes) or None,
            )

    # -- clients

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        client = self.clients.get(client_id)
        if client is None and self.settings.cimd and client_id.startswith("https://"):
            client = await self._metadata_document_client(client_id)
        return client

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None  # the SDK's /register mints it
        self.clients[client_info.client_id] = self._widened(client_info)

    def _widened(self, client: OAuthClientInformationFull) -> OAuthClientInformationFull:
        # A client may ask for any scope this server grants, whatever it registered with: a
        # step-up asks for one more than the client first got.
        valid = self.settings.valid_scopes
        return client.model_copy(update={"scope": " ".join(valid)}) if valid else client

    async def _metadata_document_client(self, url: str) -> OAuthClientInformationFull | None:
        """The client whose id is the URL of its metadata document, fetched on every use (a
        test may change it); None when it cannot be had or does not describe this URL."""
        verify: ssl.SSLContext | bool = True
        if self.settings.cimd_ca:
            verify = ssl.create_default_context(cafile=self.settings.cimd_ca)
        try:
            async with httpx.AsyncClient(verify=verify, timeout=5) as http:
                response = await http.get(url, headers={"Accept": "application/json"})
            response.raise_for_status()
            client = OAuthClientInformationFull.model_validate(response.json())
        except (httpx.HTTPError, ValueError, ValidationError) as exc:
            logger.warning("client metadata document %s: %s", url, exc)
            return None
        if client.client_id != url:
            logger.warning("client metadata document %s names client %s", url, client.client_id)
            return None
        if client.client_secret is not None or client.token_endpoint_auth_method in SECRET_METHODS:
            logger.warning("client metadata document %s asks for a client secret", url)
            return None
        public = client.model_copy(update={"token_endpoint_auth_method": "none"})
        return self._widened(public)

    def authenticate(self, client_id: str, secret: str) -> bool:
        """Whether `secret` is the pre-registered confidential client's."""
        expected = self.settings.clients.get(client_id)
        return expected is not None and hmac.compare_digest(expected.encode(), secret.encode())

    def authenticate_assertion(self, assertion: str) -> str | None:
        """The pre-registered client a private_key_jwt assertion proves (RFC 7523 §2.2, §3:
        signed with its key, issued by and about it, for this server, unexpired, unused)."""
        try:
            client_id = jwt.decode(assertion, options={"verify_signature": False}).get("sub")
            key = self.jwt_keys.get(client_id) if isinstance(client_id, str) else None
            if key is None:
                return None
            # The audience: this issuer (RFC 7523bis), or its token endpoint (RFC 7523).
            claims = jwt.decode(
                assertion,
                key,
                algorithms=JWT_ALGORITHMS,
                audience=[self.settings.issuer, f"{self.settings.issuer}/token"],
                issuer=client_id,
                options={"require": ["exp", "iss", "sub", "aud", "jti"]},
            )
        except jwt.PyJWTError as exc:
            logger.warning("client assertion refused: %s", exc)
            return None
        if claims["jti"] in self.used_assertions:
            return None
        self.used_assertions.add(claims["jti"])
        return client_id

    # -- the authorization code grant

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

    # -- the client credentials grant (the SDK's token handler has none)

    def client_credentials(
        self, client_id: str, scope: str | None, resource: str | None
    ) -> OAuthToken:
        """An access token for an authenticated pre-registered client: its own subject, the
        scopes it asked for (else the default ones), bound to the resource it named (RFC 8707;
        none named, none bound, and /mcp refuses the token). No refresh token (RFC 6749 §4.4.3)."""
        if resource is not None and not same_resource(resource, self.settings.resource):
            raise TokenError(
                "invalid_target", f"this server issues tokens for {self.settings.resource}"
            )
        scopes = scope.split() if scope is not None else list(self.settings.scopes)
        valid = self.settings.valid_scopes
        unknown = [s for s in scopes if valid and s not in valid]
        if unknown:
            raise TokenError("invalid_scope", f"unknown scope {' '.join(unknown)}")
        access = self._access(client_id, scopes, resource, client_id)
        return OAuthToken(
            access_token=access.token, expires_in=self.token_ttl, scope=" ".join(scopes) or None
        )

    # -- tokens

    async def load_access_token(self, token: str) -> AccessToken | None:
        return self.access_tokens.get(token)  # the bearer middleware checks expires_at

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        partner = self.pairs.pop(token.token, None)
        for value in (token.token, partner):
            if value is not None:
                self.access_tokens.pop(value, None)
                self.refresh_tokens.pop(value, None)
                self.pairs.pop(value, None)

    def revoke_all(self) -> None:
        """As an operator revoking every grant at the authorization server would."""
        for store in (self.codes, self.access_tokens, self.refresh_tokens, self.pairs):
            store.clear()

    def _access(
        self, client_id: str, scopes: list[str], resource: str | None, subject: str | None
    ) -> AccessToken:
        # Whole seconds (the SDK's AccessToken): the bearer middleware refuses it once
        # int(now) > expires_at, up to a second after the client's own clock has expired it.
        token = AccessToken(
            token=secrets.token_urlsafe(32),
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time() + self.token_ttl),
            resource=resource,
            subject=subject,
        )
        self.access_tokens[token.token] = token
        return token

    def _issue(self, grant: AuthorizationCode | RefreshToken) -> OAuthToken:
        access = self._access(grant.client_id, grant.scopes, grant.resource, grant.subject)
        refresh = RefreshToken(
            token=secrets.token_urlsafe(32),
            client_id=grant.client_id,
            scopes=grant.scopes,
            resource=grant.resource,
            subject=grant.subject,
        )
        self.refresh_tokens[refresh.token] = refresh
        self.pairs[access.token], self.pairs[refresh.token] = refresh.token, access.token
        return OAuthToken(
            access_token=access.token,
            expires_in=self.token_ttl,
            scope=" ".join(grant.scopes) or None,
            refresh_token=refresh.token,
        )
