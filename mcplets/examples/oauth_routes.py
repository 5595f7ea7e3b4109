"""Routes of `mcplets.examples.oauth_protected` in place of the SDK's, where the SDK's
server-side auth has no option for what a test needs: the client credentials grant at `/token`,
the RFC 9207 `iss` on every authorization response, metadata that says so (and which scopes,
and CIMD), a scope that one tool requires, and a route that revokes every token."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any
from urllib.parse import unquote_plus

from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.handlers.token import TokenErrorResponse, TokenHandler
from mcp.server.auth.json_response import PydanticJSONResponse
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.middleware.client_auth import ClientAuthenticator
from mcp.server.auth.provider import TokenError, construct_redirect_uri
from mcp.server.auth.routes import (
    build_metadata,
    build_resource_metadata_url,
    cors_middleware,
    create_protected_resource_routes,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.transport_security import (
    DEFAULT_MAX_REQUEST_BODY_SIZE,
    RequestBodyLimitMiddleware,
)
from mcp.shared.auth import OAuthMetadata
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, request_response
from starlette.types import ASGIApp, Receive, Scope, Send

from mcplets.examples.oauth_provider import JWT_ALGORITHMS, MemoryAuthorizationServer, Settings

NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
JWT_ASSERTION = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


def auth_settings(settings: Settings) -> AuthSettings:
    return AuthSettings(
        # Strings, parsed by AuthSettings itself: it keeps a path-less issuer without a slash.
        issuer_url=settings.issuer,  # type: ignore[arg-type]
        resource_server_url=settings.resource,  # type: ignore[arg-type]
        # Tokens carry the RFC 8707 resource they were issued for: refuse any other audience.
        validate_token_resource=True,
        client_registration_options=ClientRegistrationOptions(
            enabled=True,
            valid_scopes=settings.valid_scopes or None,
            default_scopes=list(settings.scopes) or None,
        ),
        revocation_options=RevocationOptions(enabled=True),
        # Not `required_scopes`: the SDK would demand them of every /mcp request (initialize
        # too), advertise only them in the PRM, and its 403 challenge names no `scope`.
    )


def install(
    app: Starlette, provider: MemoryAuthorizationServer, settings: Settings, tool: str
) -> None:
    """Replace the SDK's routes of `app` (built with `auth_settings(settings)`) with these."""
    auth = auth_settings(settings)
    assert auth.resource_server_url is not None
    metadata = authorization_server_metadata(auth, settings)
    issuer = str(metadata.issuer)  # as the client compares it: exactly the metadata's string
    replace(app, metadata_route(metadata))
    replace(app, *create_protected_resource_routes(
        resource_url=auth.resource_server_url,
        authorization_servers=[auth.issuer_url],
        scopes_supported=list(settings.scopes) or None,
    ))  # fmt: skip
    iss = f"{issuer}/another-issuer" if settings.wrong_iss else issuer
    replace(app, authorize_route(provider, iss))
    replace(app, token_route(provider, settings))
    if settings.testing_routes:
        replace(app, revoke_all_route(provider))
    if settings.required_scope:
        (mcp,) = [r for r in app.router.routes if getattr(r, "path", None) == "/mcp"]
        prm = str(build_resource_metadata_url(auth.resource_server_url))
        gate = ScopeGate(mcp.app, tool, settings.required_scope, prm)  # type: ignore[attr-defined]
        replace(app, Route("/mcp", endpoint=gate))


def replace(app: Starlette, *routes: Route) -> None:
    """Each route in place of the app's route of the same path (or first, if it has none)."""
    table: list[BaseRoute] = app.router.routes
    for route in routes:
        paths = [getattr(r, "path", None) for r in table]
        if route.path in paths:
            table[paths.index(route.path)] = route
        else:
            table.insert(0, route)


def authorization_server_metadata(auth: AuthSettings, settings: Settings) -> OAuthMetadata:
    metadata = build_metadata(
        auth.issuer_url,
        None,
        auth.client_registration_options or ClientRegistrationOptions(),
        auth.revocation_options or RevocationOptions(),
    )
    grants = list(metadata.grant_types_supported or [])
    methods = list(metadata.token_endpoint_auth_methods_supported or [])
    signing = None
    if settings.clients or settings.jwt_clients:
        grants.append("client_credentials")
    if settings.jwt_clients:
        methods.append("private_key_jwt")
        signing = JWT_ALGORITHMS
    if settings.cimd:
        methods.append("none")  # a metadata document's client is public
    return metadata.model_copy(
        update={
            "grant_types_supported": grants,
            "token_endpoint_auth_methods_supported": methods,
            "token_endpoint_auth_signing_alg_values_supported": signing,
            "authorization_response_iss_parameter_supported": True,
            "client_id_metadata_document_supported": True if settings.cimd else None,
        }
    )


def metadata_route(metadata: OAuthMetadata) -> Route:
    handler = cors_middleware(MetadataHandler(metadata).handle, ["GET", "OPTIONS"])
    return Route("/.well-known/oauth-authorization-server", handler, methods=["GET", "OPTIONS"])


def limited(handler: Any) -> ASGIApp:
    return RequestBodyLimitMiddleware(request_response(handler), DEFAULT_MAX_REQUEST_BODY_SIZE)


def authorize_route(provider: MemoryAuthorizationServer, iss: str) -> Route:
    sdk = AuthorizationHandler(provider)

    async def authorize(request: Request) -> Response:
        response = await sdk.handle(request)
        location = response.headers.get("location")
        if response.status_code == 302 and location:
            # RFC 9207: every redirect back to the client, a code or an error, names the issuer.
            response.headers["location"] = construct_redirect_uri(location, iss=iss)
        return response

    return Route("/authorize", endpoint=limited(authorize), methods=["GET", "POST"])


def token_route(provider: MemoryAuthorizationServer, settings: Settings) -> Route:
    sdk = TokenHandler(provider, ClientAuthenticator(provider))

    async def token(request: Request) -> Response:
        form = await request.form()  # kept by the request: the SDK's handler reads it again
        confidential = settings.clients or settings.jwt_clients
        if form.get("grant_type") == "client_credentials" and confidential:
            return client_credentials(provider, request, form)
        return await sdk.handle(request)

    endpoint = CORSMiddleware(
        limited(token),
        allow_origins=["*"],
        allow_methods=["POST", "OPTIONS"],
        allow_headers=[MCP_PROTOCOL_VERSION_HEADER],
    )  # as the SDK's own /token: CORS outermost, so that a 413 carries it too
    return Route("/token", endpoint=endpoint, methods=["POST", "OPTIONS"])


def client_credentials(
    provider: MemoryAuthorizationServer, request: Request, form: FormData
) -> Response:
    """RFC 6749 §4.4 for a pre-registered client, authenticated by client_secret_basic or
    client_secret_post (RFC 6749 §2.3.1), or private_key_jwt (RFC 7523 §2.2)."""
    if form.get("client_assertion_type") == JWT_ASSERTION:
        assertion = form.get("client_assertion")
        client_id = None
        if isinstance(assertion, str):
            client_id = provider.authenticate_assertion(assertion)
        if client_id is None:
            return token_error("invalid_client", "client authentication failed", 401)
    else:
        try:
            client_id, secret, basic = client_secret(request, form)
        except ValueError as exc:
            return token_error("invalid_request", str(exc), 400)
        if client_id is None or secret is None or not provider.authenticate(client_id, secret):
            challenge = {"WWW-Authenticate": 'Basic realm="token"'} if basic else {}
            return token_error("invalid_client", "client authentication failed", 401, challenge)
    scope, resource = form.get("scope"), form.get("resource")
    try:
        token = provider.client_credentials(
            client_id,
            scope if isinstance(scope, str) else None,
            resource if isinstance(resource, str) else None,
        )
    except TokenError as exc:
        return token_error(exc.error, exc.error_description, 400)
    return PydanticJSONResponse(content=token, headers=NO_STORE)


def client_secret(request: Request, form: FormData) -> tuple[str | None, str | None, bool]:
    """(client id, secret, whether Basic was used) from either method, never both."""
    header = request.headers.get("authorization", "")
    posted_id, posted_secret = form.get("client_id"), form.get("client_secret")
    if not header.lower().startswith("basic "):
        return (
            posted_id if isinstance(posted_id, str) else None,
            posted_secret if isinstance(posted_secret, str) else None,
            False,
        )
    if posted_secret is not None:
        raise ValueError("more than one client authentication method")
    try:
        client_id, _, secret = base64.b64decode(header[6:]).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None, None, True
    # Form-encoded (RFC 6749 §2.3.1), so "+" is a space.
    client_id, secret = unquote_plus(client_id), unquote_plus(secret)
    if posted_id is not None and posted_id != client_id:
        return None, None, True
    return client_id, secret, True


def token_error(
    error: str, description: str | None, status: int, headers: dict[str, str] | None = None
) -> Response:
    body = TokenErrorResponse(error=error, error_description=description)  # type: ignore[arg-type]
    return PydanticJSONResponse(
        content=body, status_code=status, headers=NO_STORE | (headers or {})
    )


def revoke_all_route(provider: MemoryAuthorizationServer) -> Route:
    async def revoke_all(request: Request) -> Response:
        provider.revoke_all()
        return Response(status_code=204)

    return Route("/testing/revoke-all", endpoint=revoke_all, methods=["POST"])


class ScopeGate:
    """`/mcp` behind the bearer check: a `tools/call` of `tool` whose token lacks `scope` is
    answered 403 insufficient_scope with the scope it needs (RFC 6750 §3.1, the MCP step-up);
    every other request passes as it came."""

    def __init__(self, app: ASGIApp, tool: str, scope: str, resource_metadata: str) -> None:
        self.app, self.tool, self.scope = app, tool, scope
        self.challenge = (
            f'Bearer error="insufficient_scope", scope="{scope}", '
            f'resource_metadata="{resource_metadata}", '
            f'error_description="{tool} needs the scope {scope}"'
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = scope.get("user")
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or not isinstance(user, AuthenticatedUser)  # the SDK answers 401 itself
            or self.scope in user.scopes
        ):
            await self.app(scope, receive, send)
            return
        messages = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
        if self._calls_the_tool(body):
            response = JSONResponse(
                {"error": "insufficient_scope", "error_description": f"needs {self.scope}"},
                status_code=403,
                headers={"WWW-Authenticate": self.challenge},
            )
            await response(scope, receive, send)
            return

        async def replay() -> Any:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    def _calls_the_tool(self, body: bytes) -> bool:
        try:
            message = json.loads(body)
        except ValueError:
            return False
        batch = message if isinstance(message, list) else [message]
        return any(
            isinstance(m, dict)
            and m.get("method") == "tools/call"
            and isinstance(m.get("params"), dict)
            and m["params"].get("name") == self.tool
            for m in batch
        )
