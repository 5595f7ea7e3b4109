"""Connecting a server behind OAuth, as an operator does it from admin: the SDK's
authorization-code flow (Protected Resource Metadata, authorization server metadata, a client
metadata document or registration, PKCE, the resource indicator, `iss` checked) runs in a
thread of the web process that started it. The operator's browser goes to the authorization
server; the callback view, in whichever process it lands, hands the code back through the
cache; the thread exchanges it, stores the grant and discovers the server's tools."""

import hashlib
import secrets
import threading
import time
from urllib.parse import parse_qs, urljoin, urlparse

import anyio
from django.core.cache import cache
from django.db import connections
from django.utils import timezone

from pools.mcp_client import (
    MemoryTokenStorage,
    ServerConfig,
    ServerUnreachable,
    describe,
    open_session,
)
from pools.oauth.models import OAuthGrant

FLOW_SECONDS = 600  # an operator has this long to approve at the authorization server
CLIENT_NAME = "MCPlet Host"


class ScopesRefused(ServerUnreachable):
    """The authorization server refused the scopes asked for (`invalid_scope`)."""


def _key(flow_id):
    return f"oauth-flow:{flow_id}"


def flow(flow_id):
    """A flow's state: server, operator, `url` (where to send the browser), `outcome`
    ({"ok": bool, "message": str}) once it ended; None when unknown or expired."""
    return cache.get(_key(flow_id)) if flow_id else None


def _update(flow_id, **changes):
    state = flow(flow_id) or {}
    cache.set(_key(flow_id), {**state, **changes}, FLOW_SECONDS)


def _state_key(state):
    return "oauth-state:" + hashlib.sha256(state.encode("utf-8", "replace")).hexdigest()


def flow_of_state(state):
    """The flow an authorization response belongs to, by its `state` (RFC 6749 §10.12)."""
    return cache.get(_state_key(state)) if isinstance(state, str) and state else None


def answer(flow_id, code, state, iss, error=""):
    """What the authorization server sent back to the callback, for the flow's thread."""
    _update(flow_id, response={"code": code, "state": state, "iss": iss, "error": error})


def start(server, operator, redirect_uri, client_metadata_url=None):
    """Begin connecting `server` for `operator`; the flow's id. The thread ends by itself."""
    flow_id = secrets.token_urlsafe(24)
    _update(flow_id, server=server.pk, operator=operator)
    thread = threading.Thread(
        target=_run,
        args=(flow_id, server.pk, operator, redirect_uri, client_metadata_url),
        name=f"oauth-connect:{server.name}",
        daemon=True,
    )
    thread.start()
    return flow_id


def wait(flow_id, until, seconds):
    """Wait (polling the cache: the flow may run in another process) until `until(state)`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state = flow(flow_id)
        if state is None or until(state):
            return state
        time.sleep(0.1)
    return flow(flow_id)


def _run(flow_id, server_id, operator, redirect_uri, client_metadata_url):
    from pools.discovery import discover
    from pools.models import McpServer

    grant = None
    try:
        server = McpServer.objects.get(pk=server_id)
        grant = OAuthGrant.objects.filter(server=server).first()
        wanted = " ".join([server.oauth_scope, grant.asked_scopes if grant else ""]).strip()
        registration = _registration(server, redirect_uri, grant, wanted)
        provider = anyio.run(
            _authorize,
            flow_id,
            server,
            redirect_uri,
            client_metadata_url,
            wanted or None,
            registration,
        )
        grant = _keep(server, provider.context, operator)
        message = f"Connected {server.name}: tokens issued by {grant.issuer}"
        try:
            message += f". {discover(server, timeout=20)}"
        except ServerUnreachable as exc:
            message += f", but discovery failed: {exc}"
        _update(flow_id, outcome={"ok": True, "message": message})
    except Exception as exc:  # the operator reads why on the page; nothing was stored
        message = f"Not connected: {describe(exc)}"
        refused = isinstance(exc, ScopesRefused) and grant is not None
        if refused and (dropped := grant.drop_asked(operator)):
            message += (
                f". The scopes the server asked for since ({dropped}) are dropped: "
                "Reconnect… asks for the configured ones alone"
            )
        _update(flow_id, outcome={"ok": False, "message": message})
    finally:
        connections.close_all()


async def _authorize(flow_id, server, redirect_uri, client_metadata_url, wanted, registration):
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

    async def redirect(url):
        state = parse_qs(urlparse(url).query).get("state", [""])[0]
        cache.set(_state_key(state), flow_id, FLOW_SECONDS)
        _update(flow_id, url=url)

    async def callback():
        deadline = time.monotonic() + FLOW_SECONDS
        while time.monotonic() < deadline:
            response = (flow(flow_id) or {}).get("response")
            if response:
                if error := response["error"]:
                    refused = ScopesRefused if error.startswith("invalid_scope") else None
                    raise (refused or ServerUnreachable)(
                        f"the authorization server answered: {error}"
                    )
                return AuthorizationCodeResult(
                    code=response["code"], state=response["state"], iss=response["iss"]
                )
            await anyio.sleep(0.2)
        raise ServerUnreachable("nobody approved at the authorization server in time")

    metadata = OAuthClientMetadata(
        client_name=CLIENT_NAME,
        redirect_uris=[redirect_uri],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        scope=server.oauth_scope or None,
        token_endpoint_auth_method="client_secret_post" if server.oauth_client_secret else None,
    )
    provider = _provider_class()(
        server.url,
        metadata,
        registration,
        redirect_handler=redirect,
        callback_handler=callback,
        client_metadata_url=client_metadata_url,
    )
    provider.wanted = wanted
    async with open_session(ServerConfig.of(server), timeout=20, auth=provider):
        pass  # opening it took the whole flow; the session proves the token works
    return provider


def _provider_class():
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.auth.utils import union_scopes

    class Provider(OAuthClientProvider):
        """The SDK's provider, asking also for the scopes the operator set and those the
        server asked for since (insufficient_scope): the SDK picks scopes from the server's
        challenge and metadata alone. (Its own extensions override the same step.)"""

        wanted = None

        async def _perform_authorization(self):
            scope = union_scopes(self.context.client_metadata.scope, self.wanted)
            self.context.client_metadata.scope = scope
            return await super()._perform_authorization()

    return Provider


def _registration(server, redirect_uri, grant, wanted):
    """The SDK's token storage during one flow: the operator's own client ID (and secret) when
    given, else the client registered for the grant before (for this redirect URI and every
    scope wanted), else what CIMD or registration makes; the tokens are stored by `_keep` once
    the session opened with them, so a failed connect leaves a working grant as it was."""
    from mcp.shared.auth import OAuthClientInformationFull

    if not server.oauth_client_id:
        kept = (grant.secret or {}).get("client") if grant is not None else None
        if kept and redirect_uri in kept.get("redirect_uris", ()):
            registered = set((kept.get("scope") or "").split())
            if not registered or set((wanted or "").split()) <= registered:
                return MemoryTokenStorage(OAuthClientInformationFull.model_validate(kept))
        return MemoryTokenStorage()
    return MemoryTokenStorage(
        OAuthClientInformationFull(
            client_id=server.oauth_client_id,
            client_secret=server.oauth_client_secret or None,
            redirect_uris=[redirect_uri],
            token_endpoint_auth_method=(
                "client_secret_post" if server.oauth_client_secret else "none"
            ),
        )
    )


def _keep(server, context, operator):
    metadata = context.oauth_metadata
    origin = context.get_authorization_base_url(server.url)
    grant = OAuthGrant.objects.filter(server=server).first() or OAuthGrant(server=server)
    grant.issuer = str(metadata.issuer) if metadata else (context.auth_server_url or origin)
    grant.resource = context.get_resource_url()
    grant.client_id = context.client_info.client_id
    grant.connected_at, grant.connected_by, grant.refreshed_at = timezone.now(), operator, None
    grant.secret = {
        "client": context.client_info.model_dump(mode="json", exclude_none=True),
        "token_endpoint": str(metadata.token_endpoint) if metadata else urljoin(origin, "/token"),
        "revocation_endpoint": str(metadata.revocation_endpoint or "") if metadata else "",
    }
    grant.keep(context.current_tokens)
    grant.save()
    grant.record("server.oauth.connected", actor_id=operator, resource=grant.resource)
    return grant
