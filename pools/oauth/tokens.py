"""A fresh access token for a server's grant, in whichever process needs one: refreshed before
it lapses, one refresh at a time across workers (a rotated refresh token is good once, so a
second refresh of it would lose the grant), and a refresh the authorization server refuses
marks the server "needs reconnecting" instead of failing calls obscurely."""

import asyncio
import time

from django.db import connections
from django.db.models import Q
from django.utils import timezone

from pools.mcp_client import ServerUnreachable, describe
from pools.oauth.models import OAuthGrant

LOCK_SECONDS = 60  # a refresh holds the lock at most this long (its HTTP timeout is less)
WAIT_SECONDS = 30  # how long a process waits for another one's refresh


class NotConnected(ServerUnreachable):
    """The server needs OAuth and the host holds no usable grant: an operator must (re)connect
    it. Raised before anything is sent, so a call that meets it did not run."""


def access_token(server, stale=""):
    """The grant's access token, refreshed first when it is due or when it is `stale` (the
    token the server just refused)."""
    grant = OAuthGrant.objects.filter(server=server).first()
    if grant is None:
        raise NotConnected(
            f"{server.name}: the server needs OAuth and is not connected; an operator connects "
            "it in admin (MCP servers → Connect…)"
        )
    if grant.usable and not grant.due() and grant.access_token != stale:
        return grant.access_token
    from mcplet_host.locks import make_lock  # redis-py: loaded by the first refresh, not at start

    lock, deadline = make_lock(f"oauth-refresh:{server.pk}", LOCK_SECONDS), time.monotonic()
    while not lock.acquire():
        if time.monotonic() - deadline > WAIT_SECONDS:
            raise ServerUnreachable(f"{server.name}: another worker's token refresh is stuck")
        time.sleep(0.05)
    try:
        grant.refresh_from_db()
        if grant.usable and not grant.due() and grant.access_token != stale:
            return grant.access_token  # another worker refreshed it while this one waited
        return _refreshed(grant)
    finally:
        lock.release()


def _refreshed(grant):
    name = grant.server.name
    if not grant.usable:
        raise NotConnected(f"{name}: the server needs reconnecting: {grant.problem}")
    if not grant.refresh_token:
        grant.lapse("the access token expired and the authorization server gave no refresh token")
        raise NotConnected(f"{name}: the server needs reconnecting: {grant.problem}")
    import httpx2
    from mcp.shared.auth import OAuthToken
    from pydantic import ValidationError

    data = {
        "grant_type": "refresh_token",
        "refresh_token": grant.refresh_token,
        "resource": grant.resource,  # RFC 8707: the token stays bound to the same server
    }
    data, headers = grant.authenticate(data, {"Accept": "application/json"})
    try:
        response = httpx2.post(
            grant.secret["token_endpoint"], data=data, headers=headers, timeout=20
        )
    except httpx2.HTTPError as exc:  # the grant may be fine: try again later
        raise ServerUnreachable(
            f"{name}: its authorization server {grant.issuer} did not answer the token refresh "
            f"({describe(exc)})"
        ) from None
    if response.status_code >= 500 or response.status_code == 429:
        raise ServerUnreachable(
            f"{name}: its authorization server {grant.issuer} answered the token refresh with "
            f"HTTP {response.status_code}; trying again later"
        )
    try:
        tokens = OAuthToken.model_validate_json(response.content) if response.is_success else None
    except ValidationError:
        tokens = None
    if tokens is None:
        grant.lapse(
            f"the authorization server {grant.issuer} refused the token refresh: {_said(response)}"
        )
        raise NotConnected(f"{name}: the server needs reconnecting: {grant.problem}")
    grant.keep(tokens)
    grant.refreshed_at = timezone.now()
    grant.save()
    return grant.access_token


def _said(response):
    """An OAuth error response in one line (RFC 6749 §5.2), never echoing more than asked."""
    try:
        body = response.json()
    except ValueError:
        body = {}
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, str):
        return f"HTTP {response.status_code}"
    text = error[:100]
    description = body.get("error_description")
    if isinstance(description, str):
        text += f" ({description[:300]})"
    return f"HTTP {response.status_code} {text}"


def in_thread(server_id, stale):
    from pools.models import McpServer

    try:
        return access_token(McpServer.objects.get(pk=server_id), stale)
    finally:
        connections.close_all()  # this worker thread's own


async def ensure(server_id):
    """Refresh a due token before a call leaves: a refresh refused here sent nothing."""
    await asyncio.to_thread(in_thread, server_id, "")


def _lapsed(server_id, since):
    try:
        grant = OAuthGrant.objects.filter(
            Q(lapsed_at__gte=since) | Q(asked_at__gte=since), server_id=server_id
        ).first()
        return grant and f"{grant.server.name}: the server needs reconnecting: {grant.problem}"
    finally:
        connections.close_all()


async def refused_since(server_id, since):
    """Why the server refused the grant after `since` (a 401 that no refresh cured, or a 403
    insufficient_scope: either way it ran nothing with it), or None. The SDK's transport says
    only that the connection closed, or that the server "returned an error response"."""
    return await asyncio.to_thread(_lapsed, server_id, since)


def _asked(server_id, scopes):
    try:
        grant = OAuthGrant.objects.select_related("server").filter(server_id=server_id).first()
        if grant is not None:
            grant.ask(scopes)
    finally:
        connections.close_all()


async def asked(server_id, scopes):
    await asyncio.to_thread(_asked, server_id, scopes)
