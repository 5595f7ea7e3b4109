import contextlib
import re
from urllib.parse import urlparse

import ada_url
import idna
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Count, Q

from mcplet_host import ratelimit, storable
from pools.fields import SealedJSONField


def validate_http_url(value):
    """http(s) with a host; unlike URLValidator, single-label hosts (compose services) are fine."""
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValidationError("Enter an http:// or https:// URL with a host.")
    _, ambiguity = read_url(value)  # the host shown must be the host the clients connect to
    if ambiguity:
        raise ValidationError(f"Enter a URL every client reads alike: {ambiguity}.")


class Pool(models.Model):
    """A named MCPlet Pool (spec §3.5): shared policy for the MCPlets that declare it."""

    name = models.SlugField(
        max_length=100,
        unique=True,
        help_text="The name MCPlets declare in _meta.pool, e.g. media-pool. A tool naming a pool "
        "that does not exist here is rejected until it is created (spec §5.3.3).",
    )
    description = models.TextField(blank=True)
    rate_limit_per_minute = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Calls per minute to this pool's MCPlets, shared by all agents and workers. "
        "Empty: no limit.",
    )
    domain_allowlist = models.JSONField(
        validators=[storable.validate],
        default=list,
        blank=True,
        help_text='Hosts that URL-valued arguments may point to, e.g. ["api.weather.example", '
        '"*.example.org"]. Empty: any host.',
    )

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def clean(self):
        if not isinstance(self.domain_allowlist, list) or not all(
            isinstance(d, str) and d for d in self.domain_allowlist
        ):
            raise ValidationError({"domain_allowlist": "Give a list of host names."})

    def take_call(self, now=None):
        """Count one call against the rate limit: None if allowed, else the milliseconds to
        wait (a sliding minute, shared by every worker: mcplet_host.ratelimit)."""
        if not self.rate_limit_per_minute:
            return None
        return ratelimit.take(f"pool:{self.pk}", self.rate_limit_per_minute, 60, now)

    def disallowed_urls(self, arguments):
        """(url, why) for each URL-valued argument outside the allowlist, or ambiguous (two
        URL parsers could read different hosts in it). Without an allowlist, any URL passes."""
        if not self.domain_allowlist:
            return []
        allowed = [_allowlist_host(pattern) for pattern in self.domain_allowlist]
        refused = []
        for url, host, ambiguity in _urls_in(arguments):
            if ambiguity:
                refused.append((url, f"is ambiguous: {ambiguity}"))
            elif not any(_matches(host, pattern) for pattern in allowed):
                refused.append((url, f"points to {host}, which is not on the allowlist"))
        return refused


# URLs as the clients that fetch them read them (WHATWG URL rules, the `ada` parser), so that
# `http://evil.example\@allowed.example/` is evil.example here too (issue 14).
FETCHED_SCHEMES = ("http", "https", "ws", "wss", "ftp")
C0_CONTROLS_AND_SPACE = "".join(map(chr, range(0x21)))


def read_url(text):
    """How a fetching client reads `text`: None when it is not a URL of FETCHED_SCHEMES,
    else (host, ambiguity) — its host (lowercase ASCII) and why parsers might disagree."""
    cleaned = text.strip(C0_CONTROLS_AND_SPACE).translate({9: None, 10: None, 13: None})
    scheme, colon, rest = cleaned.partition(":")
    if not colon or scheme.lower() not in FETCHED_SCHEMES:
        return None
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in text):
        return "", "it holds spaces or control characters, which URL parsers drop differently"
    if "\\" in text:
        return "", "it holds a backslash, which WHATWG parsers read as '/' and others do not"
    if not rest.startswith("//"):
        return "", f"its host does not follow '{scheme}://'"
    try:
        host = ada_url.URL(text).hostname.rstrip(".")
    except ValueError:
        return "", "it is not a valid URL"
    authority = re.split(r"[/?#]", rest[2:], maxsplit=1)[0]
    if "@" in authority:
        return "", "it names a user before its host (userinfo)"
    if "%" in authority:
        return "", "its host is percent-encoded"
    if not authority.isascii():
        raw_host = re.sub(r":\d*$", "", authority).rstrip(".")
        try:
            normal = idna.encode(raw_host).decode()  # strict IDNA 2008: no mappings
        except idna.IDNAError:
            normal = None
        if normal != host:
            return "", "its host is not written in IDNA normal form"
    return host, ""


def site_of(url):
    """Where a person reads that `url` leads: its host as `read_url` reads it, with its port when
    not its scheme's default (a wallet at 127.0.0.1:9000 is not the host at 127.0.0.1:8000);
    "" for what is not a usable web URL."""
    host, ambiguity = read_url(url) or ("", "not a web URL")
    if not host or ambiguity:
        return ""
    port = ada_url.URL(url).port  # "" for the scheme's default
    return f"{host}:{port}" if port else host


def _urls_in(value):
    """(url, host, ambiguity) for every URL string anywhere in `value`."""
    if isinstance(value, str):
        read = read_url(value)
        if read is not None:
            yield value, *read
    elif isinstance(value, dict):
        for item in value.values():
            yield from _urls_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from _urls_in(item)


class McpServerQuerySet(models.QuerySet):
    def with_tool_counts(self):
        """Each server with `accepted_count` and `rejected_count`, for its state in lists."""
        return self.select_related("oauth_grant").annotate(
            accepted_count=Count("mcplets", filter=Q(mcplets__status=Mcplet.Status.ACCEPTED)),
            rejected_count=Count("mcplets", filter=Q(mcplets__status=Mcplet.Status.REJECTED)),
        )


def _allowlist_host(pattern):
    pattern = pattern.strip().lower().rstrip(".")
    wildcard, name = ("*.", pattern[2:]) if pattern.startswith("*.") else ("", pattern)
    with contextlib.suppress(idna.IDNAError):  # not a host name: it matches only itself
        name = idna.encode(name, uts46=True).decode()
    return wildcard + name


def _matches(host, pattern):
    """`*.weather.example` matches whole labels below it (a.weather.example), never
    evilweather.example nor weather.example itself."""
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern


class McpServer(models.Model):
    """An MCP server the host connects to, and its lifecycle state (MGP §11.2)."""

    # Not a lifecycle status: shown instead of `connected` when none of its tools is usable.
    WARNING = "warning"

    class Transport(models.TextChoices):
        STDIO = "stdio", "stdio (the host launches the command)"
        HTTP = "http", "streamable HTTP"

    class Auth(models.TextChoices):
        NONE = "none", "none"
        HEADERS = "headers", "static headers (e.g. Authorization: Bearer …)"
        OAUTH = "oauth", "OAuth: authorization code, connected by an operator"
        CLIENT_CREDENTIALS = "client_credentials", "OAuth: client credentials"

    OAUTH_KINDS = (Auth.OAUTH, Auth.CLIENT_CREDENTIALS)

    class Status(models.TextChoices):
        REGISTERED = "registered"
        CONNECTING = "connecting"
        CONNECTED = "connected"
        ERROR = "error"
        DISCONNECTED = "disconnected"

    name = models.SlugField(max_length=100, unique=True)
    transport = models.CharField(max_length=8, choices=Transport.choices)
    command = models.CharField(
        max_length=500, blank=True, help_text="stdio: the program to launch, e.g. python."
    )
    args = models.JSONField(
        validators=[storable.validate],
        default=list,
        blank=True,
        help_text='stdio: its arguments, e.g. ["-m", "mcplets.restaurant.crm"].',
    )
    env = SealedJSONField(
        default=dict,
        blank=True,
        help_text="stdio: extra environment variables (secret: stored sealed).",
    )
    url = models.CharField(
        max_length=500,
        blank=True,
        validators=[validate_http_url],
        help_text="http: the streamable HTTP endpoint, e.g. http://crm:9000/mcp.",
    )
    headers = SealedJSONField(
        default=dict,
        blank=True,
        help_text="http: request headers, e.g. Authorization (secret: stored sealed).",
    )
    auth = models.CharField(
        "authentication",
        max_length=20,
        choices=Auth.choices,
        default=Auth.NONE,
        help_text="http: how the host proves itself to the server. OAuth: an operator connects "
        "it once (Connect… on this page); client credentials: the host gets its own tokens.",
    )
    oauth_client_id = models.CharField(
        "OAuth client ID",
        max_length=500,
        blank=True,
        help_text="Client credentials: required. Authorization code: only when the "
        "authorization server supports neither client metadata documents nor registration.",
    )
    oauth_client_secret = SealedJSONField(
        "OAuth client secret",
        default="",
        blank=True,
        help_text="A shared secret, or a private key in PEM (private_key_jwt). Stored sealed.",
    )
    oauth_scope = models.CharField(
        "OAuth scopes",
        max_length=500,
        blank=True,
        help_text="Space-separated; empty: what the server's metadata asks for.",
    )
    oauth_issuer = models.CharField(
        "OAuth issuer",
        max_length=500,
        blank=True,
        validators=[validate_http_url],
        help_text="Client credentials: the authorization server the credentials belong to; "
        "they are sent nowhere else.",
    )
    enabled = models.BooleanField(default=True)
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.REGISTERED, editable=False
    )
    last_error = models.TextField(blank=True, editable=False)
    last_discovery_at = models.DateTimeField(null=True, blank=True, editable=False)
    protocol_version = models.CharField(
        "MCP revision",
        max_length=40,
        blank=True,
        editable=False,
        help_text="The MCP revision the host and the server agreed on when it was last "
        "discovered: 2026-07-28 (server/discover) or an older one (the initialize handshake).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = McpServerQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"

    def __str__(self):
        return self.name

    def clean(self):
        if self.transport == self.Transport.STDIO and not self.command:
            raise ValidationError({"command": "A stdio server needs the command to launch."})
        if self.transport == self.Transport.HTTP and not self.url:
            raise ValidationError({"url": "A streamable HTTP server needs its URL."})
        if not isinstance(self.args, list) or not all(isinstance(a, str) for a in self.args):
            raise ValidationError({"args": "Give a JSON list of strings."})
        if self.auth in self.OAUTH_KINDS:
            self._clean_oauth()
        for field in ("env", "headers"):
            value = getattr(self, field)
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise ValidationError({field: "Give names and string values."})

    def _clean_oauth(self):
        if self.transport != self.Transport.HTTP:
            raise ValidationError({"auth": "OAuth is for streamable HTTP servers."})
        if any(name.lower() == "authorization" for name in self.headers or {}):
            raise ValidationError(
                {"headers": "With OAuth the host sends its own Authorization header: remove it."}
            )
        if self.auth == self.Auth.CLIENT_CREDENTIALS:
            missing = {
                "oauth_client_id": "Client credentials need the client ID.",
                "oauth_client_secret": "Client credentials need the client secret.",
                "oauth_issuer": "Name the authorization server the credentials belong to.",
            }
            for name, message in missing.items():
                if not getattr(self, name):
                    raise ValidationError({name: message})
            from pools.mcp_client import signing_algorithm

            try:
                signing_algorithm(self.oauth_client_secret)
            except ValueError as exc:
                raise ValidationError({"oauth_client_secret": f"{exc}."}) from None

    @property
    def oauth_state(self):
        """For lists: "" (no OAuth), "not connected", "connected" or "needs reconnecting"."""
        if self.auth != self.Auth.OAUTH:
            return ""
        grant = getattr(self, "oauth_grant", None)
        return "not connected" if grant is None else grant.get_status_display()

    @property
    def endpoint(self):
        """Where the server is, without secrets: safe for lists and logs."""
        if self.transport == self.Transport.HTTP:
            return self.url
        return " ".join([self.command, *self.args])

    def _tool_count(self, status):
        annotated = getattr(self, f"{status}_count", None)  # from with_tool_counts()
        return self.mcplets.filter(status=status).count() if annotated is None else annotated

    @property
    def all_rejected(self):
        """It answers, but every tool it lists was rejected, so nothing of it is routable: a
        plain MCP server (no `_meta.mcpletType`) or MCPlets that all break the spec."""
        return (
            self.status == self.Status.CONNECTED
            and self._tool_count(Mcplet.Status.REJECTED) > 0
            and self._tool_count(Mcplet.Status.ACCEPTED) == 0
        )

    @property
    def plain(self):
        """Some of its tools declare no MCPlet metadata: a plain MCP server, which the MCPlet
        adapter makes an MCPlet server (other rejections call for other advice)."""
        rejected = self.mcplets.filter(status=Mcplet.Status.REJECTED)
        return rejected.filter(rejection_reason__contains=Mcplet.UNTYPED).exists()

    @property
    def state(self):
        """What lists show (and colour by): the lifecycle status, or `warning`."""
        return self.WARNING if self.all_rejected else self.status

    @property
    def state_label(self):
        return "Connected: every tool rejected" if self.all_rejected else self.get_status_display()

    def rejection_reasons(self, limit=3):
        """The most common reasons its tools were rejected: [(reason, how many tools)]."""
        return list(
            self.mcplets.filter(status=Mcplet.Status.REJECTED)
            .order_by()
            .values_list("rejection_reason")
            .annotate(tools=Count("id"))
            .order_by("-tools", "rejection_reason")[:limit]
        )


class McpletQuerySet(models.QuerySet):
    def routable(self):
        """Accepted, and pool-less or in the registered pool it declares: a pool deleted (its
        tools' `pool` set to NULL) or renamed since discovery leaves them unroutable at once."""
        return self.filter(
            models.Q(pool_name="") | models.Q(pool__name=models.F("pool_name")),
            status=Mcplet.Status.ACCEPTED,
        )


class Mcplet(models.Model):
    """One tool discovered on an MCP server, its parsed `_meta` and the host's verdict."""

    class Type(models.TextChoices):
        READ = "read"
        PREPARE = "prepare"
        ACTION = "action"

    class Status(models.TextChoices):
        ACCEPTED = "accepted"
        REJECTED = "rejected"
        EVICTED = "evicted"

    # The rejection of a plain MCP server's tool (pools.discovery): no `_meta.mcpletType`.
    UNTYPED = "it declares no _meta.mcpletType"

    class Enforcement(models.TextChoices):
        STRICT = "strict"
        HOST_ONLY = "host-only"

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="mcplets")
    name = models.CharField(max_length=200, db_index=True)
    title = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict)
    meta = models.JSONField("raw _meta", default=dict, blank=True)
    mcplet_type = models.CharField(max_length=8, choices=Type.choices, blank=True)
    visibility = models.JSONField(default=list, blank=True)
    # Derived from `visibility` on save, so surfaces can be filtered and indexed on any database.
    model_visible = models.BooleanField(default=False, editable=False)
    app_visible = models.BooleanField(default=False, editable=False)
    pool_name = models.CharField(
        max_length=100, blank=True, help_text="The pool the tool declares in _meta.pool."
    )
    pool = models.ForeignKey(
        Pool,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="mcplets",
        help_text="The registered pool it belongs to; empty for a pool-less MCPlet.",
    )
    auth_required = models.CharField(max_length=32, blank=True)
    auth_enforcement = models.CharField(max_length=16, choices=Enforcement.choices, blank=True)
    auth_prompt_message = models.TextField(blank=True)
    result_schema_uri = models.CharField(max_length=500, blank=True)
    result_schema = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=8, choices=Status.choices, db_index=True)
    rejection_reason = models.TextField(blank=True)
    discovered_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = McpletQuerySet.as_manager()

    class Meta:
        ordering = ["server__name", "name"]
        verbose_name = "MCPlet"
        constraints = [
            models.UniqueConstraint(fields=["server", "name"], name="unique_tool_per_server"),
            # Routing is by tool name, so at most one server may serve an accepted name.
            models.UniqueConstraint(
                fields=["name"],
                condition=models.Q(status="accepted"),
                name="unique_accepted_tool_name",
            ),
        ]
        indexes = [models.Index(fields=["status", "model_visible", "pool"])]

    def __str__(self):
        return self.name

    def save(self, *args, **kwargs):
        self.sync_surfaces()
        super().save(*args, **kwargs)

    def sync_surfaces(self):
        surfaces = self.visibility if isinstance(self.visibility, list) else []
        self.model_visible, self.app_visible = "model" in surfaces, "app" in surfaces

    @property
    def unroutable_reason(self):
        """Why a tool is not routable (its status's reason, or its missing pool)."""
        if self.status != self.Status.ACCEPTED:
            return f"it is {self.status}: {self.rejection_reason}"
        if self.pool_name and (self.pool is None or self.pool.name != self.pool_name):
            return (
                f"it declares the pool {self.pool_name!r}, which is not registered on this host "
                "(§5.3.3)"
            )
        return ""

    @property
    def needs_approval(self):
        """Spec §4, §6.7: an action, or any tool declaring auth, waits for a person."""
        return self.mcplet_type == self.Type.ACTION or bool(self.auth_required)


from pools.oauth.models import OAuthGrant  # noqa: E402, F401 (the app's models)
