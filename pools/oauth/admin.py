"""Connect… and Disconnect, the admin pages of a server behind OAuth (McpServerAdmin's URLs)."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from pools.mcp_client import describe
from pools.models import McpServer
from pools.oauth import connect, views
from pools.oauth.models import OAuthGrant

URL_WAIT = 15  # seconds to wait for the authorization URL (metadata discovery, registration)


def urls(model_admin):
    wrap = model_admin.admin_site.admin_view
    return [
        path(
            "<int:pk>/oauth/connect/",
            wrap(ConnectPages(model_admin).connect),
            name="pools_mcpserver_oauth_connect",
        ),
        path(
            "<int:pk>/oauth/disconnect/",
            wrap(ConnectPages(model_admin).disconnect),
            name="pools_mcpserver_oauth_disconnect",
        ),
    ]


def summary(server):
    """The change page's "OAuth connection" line: whom the tokens were issued by, their scopes,
    expiry — never a token — and the button to connect, reconnect or disconnect."""
    if server.pk is None or server.auth != McpServer.Auth.OAUTH:
        return "—"
    connect_url = reverse("admin:pools_mcpserver_oauth_connect", args=[server.pk])
    grant = OAuthGrant.objects.filter(server=server).first()
    if grant is None:
        return format_html(
            '<strong style="color:#ba2121">Not connected.</strong> '
            '<a class="button" href="{}">Connect…</a>',
            connect_url,
        )
    problem = format_html(" ({})", grant.problem) if grant.problem else ""
    return format_html(
        '<strong style="color:{}">{}</strong>{}<br>Issued by {} to client {} for {}; '
        "scopes: {}; {}; connected {} by {}.<br>"
        '<a class="button" href="{}">{}</a> <a class="button" href="{}">Disconnect</a>',
        "green" if grant.usable else "#ba2121",
        grant.get_status_display().capitalize(),
        problem,
        grant.issuer,
        grant.client_id,
        grant.resource,
        grant.scopes or "none named",
        grant.expires_in_words,
        grant.connected_at.strftime("%Y-%m-%d %H:%M"),
        grant.connected_by or "—",
        connect_url,
        "Reconnect…",
        reverse("admin:pools_mcpserver_oauth_disconnect", args=[server.pk]),
    )


class ConnectPages:
    def __init__(self, model_admin):
        self.model_admin = model_admin

    def _server(self, request, pk):
        server = get_object_or_404(McpServer, pk=pk)
        if not self.model_admin.has_change_permission(request, server):
            raise PermissionDenied
        return server

    def _page(self, request, server, template, **context):
        return TemplateResponse(
            request,
            f"admin/pools/mcpserver/{template}",
            {
                **self.model_admin.admin_site.each_context(request),
                "opts": McpServer._meta,
                "server": server,
                "title": context.pop("title"),
                **context,
            },
        )

    def connect(self, request, pk):
        server = self._server(request, pk)
        back = redirect("admin:pools_mcpserver_change", server.pk)
        if server.auth != McpServer.Auth.OAUTH:
            messages.error(request, f"{server.name} does not use OAuth (authorization code).")
            return back
        if request.method != "POST":
            return self._page(
                request,
                server,
                "oauth_connect.html",
                title=f"Connect {server.name}",
                redirect_uri=views.redirect_uri(),
                client_metadata_url=views.client_metadata_url(),
            )
        flow_id = connect.start(
            server, request.user.get_username(), views.redirect_uri(), views.client_metadata_url()
        )
        state = connect.wait(flow_id, lambda s: "url" in s or "outcome" in s, URL_WAIT)
        if state and state.get("url"):
            return redirect(state["url"])
        outcome = (state or {}).get("outcome") or {
            "ok": False,
            "message": "Not connected: the server's authorization server did not answer in time.",
        }
        (messages.success if outcome["ok"] else messages.error)(request, outcome["message"])
        return back

    def disconnect(self, request, pk):
        server = self._server(request, pk)
        grant = get_object_or_404(OAuthGrant, server=server)
        if request.method != "POST":
            return self._page(
                request,
                server,
                "oauth_disconnect.html",
                title=f"Disconnect {server.name}",
                grant=grant,
            )
        revoked = _revoke(grant)
        grant.record(
            "server.oauth.disconnected", actor_id=request.user.get_username(), revoked=revoked
        )
        grant.delete()
        messages.success(
            request,
            f"Disconnected {server.name}: the host forgot its tokens"
            + (
                ", and the authorization server revoked them."
                if revoked == "yes"
                else f" ({revoked})."
            ),
        )
        return redirect("admin:pools_mcpserver_change", server.pk)


def _revoke(grant):
    """Ask the authorization server to revoke the refresh token (RFC 7009; revoking it ends
    its access tokens too); "yes", or why not."""
    endpoint = grant.secret.get("revocation_endpoint")
    token = grant.refresh_token or grant.access_token
    if not endpoint:
        return "its authorization server offers no revocation"
    import httpx2

    hint = "refresh_token" if grant.refresh_token else "access_token"
    data, headers = grant.authenticate({"token": token, "token_type_hint": hint}, {})
    try:
        response = httpx2.post(endpoint, data=data, headers=headers, timeout=10)
    except httpx2.HTTPError as exc:
        return f"revoking them failed: {describe(exc)}"
    return "yes" if response.is_success else f"revoking them failed: HTTP {response.status_code}"
