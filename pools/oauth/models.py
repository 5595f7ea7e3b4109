"""The grant the host holds for a server behind OAuth: tokens sealed at rest, bound to the
issuer and resource they were issued for, and what may be shown of them."""

from datetime import timedelta

from django.db import models
from django.utils import timezone

from mcplet_host import audit
from pools.fields import SealedJSONField

# Refreshed this long before the expiry (at most a quarter of the token's life): a call must
# not leave with a token about to lapse.
REFRESH_MARGIN = 30


class OAuthGrant(models.Model):
    """What an authorization server granted the host for one MCP server (one row per server).

    `secret` holds what is never shown: the tokens and the client's credentials, sealed. The
    rest is what an operator may read: who issued it, for which resource, which scopes, when
    it lapses, and whether it still works."""

    class Status(models.TextChoices):
        CONNECTED = "connected", "connected"
        NEEDS_RECONNECTING = "needs_reconnecting", "needs reconnecting"

    server = models.OneToOneField(
        "pools.McpServer", on_delete=models.CASCADE, related_name="oauth_grant"
    )
    status = models.CharField(max_length=24, choices=Status.choices)
    issuer = models.CharField(max_length=500, help_text="The authorization server (its issuer).")
    resource = models.CharField(max_length=500, help_text="What the tokens are for (RFC 8707).")
    scopes = models.CharField(max_length=1000, blank=True)
    client_id = models.CharField(max_length=500, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    refresh_after = models.DateTimeField(null=True, blank=True, editable=False)
    connected_at = models.DateTimeField()
    connected_by = models.CharField(max_length=150, blank=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)
    problem = models.TextField(blank=True)
    asked_scopes = models.CharField(
        max_length=1000, blank=True, help_text="Scopes the server asked for (insufficient_scope)."
    )
    asked_at = models.DateTimeField(null=True, blank=True)
    lapsed_at = models.DateTimeField(null=True, blank=True)
    secret = SealedJSONField(default=dict, editable=False)

    class Meta:
        verbose_name = "OAuth grant"

    def __str__(self):
        return f"{self.server}: {self.get_status_display()}, issued by {self.issuer}"

    @property
    def usable(self):
        return self.status == self.Status.CONNECTED

    def due(self, now=None):
        """Whether the access token should be refreshed before it is used."""
        return self.refresh_after is not None and (now or timezone.now()) >= self.refresh_after

    def keep(self, tokens, now=None):
        """Store a token response (the SDK's OAuthToken): a refresh that rotates nothing keeps
        the refresh token and scopes it had (RFC 6749 §6)."""
        now = now or timezone.now()
        held = self.secret.get("tokens") or {}
        fresh = tokens.model_dump(mode="json", exclude_none=True)
        fresh.setdefault("refresh_token", held.get("refresh_token"))
        fresh.setdefault("scope", held.get("scope") or self.scopes or None)
        self.secret = {**self.secret, "tokens": {k: v for k, v in fresh.items() if v}}
        self.scopes = fresh.get("scope") or ""
        expires_in = fresh.get("expires_in")
        self.expires_at = now + timedelta(seconds=expires_in) if expires_in else None
        margin = min(REFRESH_MARGIN, expires_in / 4) if expires_in else 0
        self.refresh_after = now + timedelta(seconds=expires_in - margin) if expires_in else None
        self.status, self.problem, self.lapsed_at = self.Status.CONNECTED, "", None
        granted = set(self.scopes.split())
        self.asked_scopes = " ".join(s for s in self.asked_scopes.split() if s not in granted)

    @property
    def access_token(self):
        return (self.secret.get("tokens") or {}).get("access_token", "")

    @property
    def refresh_token(self):
        return (self.secret.get("tokens") or {}).get("refresh_token", "")

    def authenticate(self, data, headers):
        """Client authentication at the token endpoints, as the client was registered (the
        SDK's own: client_secret_basic, client_secret_post or none), `client_id` in the body as
        the SDK sends it. Returns (data, headers)."""
        from mcp.client.auth.oauth2 import OAuthContext
        from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata

        context = OAuthContext(self.resource, OAuthClientMetadata(redirect_uris=None), *[None] * 3)
        context.client_info = OAuthClientInformationFull.model_validate(self.secret["client"])
        return context.prepare_token_auth({"client_id": self.client_id, **data}, headers)

    def lapse(self, reason):
        """The grant no longer works (a refresh refused, a token revoked): the server needs
        reconnecting by an operator, and the audit says why — never with a token."""
        self.status, self.problem = self.Status.NEEDS_RECONNECTING, reason
        self.lapsed_at = timezone.now()
        self.save(update_fields=["status", "problem", "lapsed_at"])
        self.record("server.oauth.refresh_failed", audit.FAILURE, reason=reason)

    def ask(self, scopes):
        """The server refused a call for want of `scopes` (a 403 insufficient_scope): the
        operator is told, and the next connect asks for them too. Once per new scope."""
        from mcp.client.auth.utils import union_scopes

        wanted = (union_scopes(self.asked_scopes or None, scopes) or "")[:1000]
        new, self.asked_scopes, self.asked_at = wanted != self.asked_scopes, wanted, timezone.now()
        self.problem = (
            f"the server asks for the scopes {scopes} (insufficient_scope), which the grant lacks: "
            "reconnect to grant them"
        )
        self.save(update_fields=["asked_scopes", "asked_at", "problem"])
        if new:
            self.record("server.oauth.insufficient_scope", audit.FAILURE, asked=scopes)

    def drop_asked(self, operator):
        """The authorization server refused the scopes a connect asked for (invalid_scope):
        those the server asked for since are dropped, so that the next connect asks for the
        configured ones alone (else every Reconnect… failed the same way). What was dropped."""
        dropped, self.asked_scopes, self.asked_at = self.asked_scopes, "", None
        if dropped:
            self.problem = (
                f"the authorization server refused the scopes {dropped} the server asked for "
                "(invalid_scope)"
            )
            self.save(update_fields=["asked_scopes", "asked_at", "problem"])
            self.record("server.oauth.scopes_refused", audit.FAILURE, operator, dropped=dropped)
        return dropped

    def record(self, event_type, result=audit.SUCCESS, actor_id="", **details):
        audit.record(
            event_type,
            actor_type=audit.ActorType.USER if actor_id else audit.ActorType.SYSTEM,
            actor_id=actor_id,
            target_server=self.server.name,
            result=result,
            details={"issuer": self.issuer, "scopes": self.scopes, **details},
        )

    @property
    def expires_in_words(self):
        if self.expires_at is None:
            return "does not expire"
        left = (self.expires_at - timezone.now()).total_seconds()
        return "expired" if left <= 0 else f"expires in {int(left // 60)} min {int(left % 60)} s"
