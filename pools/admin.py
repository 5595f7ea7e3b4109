from django.contrib import admin, messages
from django.db.models import Count, Q
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from mcplet_host.forms import FORM_FIELDS
from pools.discovery import discover
from pools.forms import McpServerForm, SecretMappingField
from pools.mcp_client import ServerUnreachable
from pools.models import Mcplet, McpServer, Pool
from pools.oauth import admin as oauth_admin


@admin.register(Pool)
class PoolAdmin(admin.ModelAdmin):
    formfield_overrides = FORM_FIELDS
    list_display = [
        "name",
        "description",
        "rate_limit_per_minute",
        "allowlist",
        "accepted_mcplets",
        "agent_count",
    ]
    search_fields = ["name", "description"]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(
                n_mcplets=Count(
                    "mcplets", filter=Q(mcplets__status=Mcplet.Status.ACCEPTED), distinct=True
                ),
                n_agents=Count("agents", distinct=True),
            )
        )

    @admin.display(description="domain allowlist")
    def allowlist(self, obj):
        return ", ".join(obj.domain_allowlist) or "any host"

    @admin.display(description="accepted MCPlets", ordering="n_mcplets")
    def accepted_mcplets(self, obj):
        return obj.n_mcplets

    @admin.display(description="agents granted", ordering="n_agents")
    def agent_count(self, obj):
        return obj.n_agents


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    form = McpServerForm
    list_display = [
        "name",
        "transport",
        "endpoint",
        "enabled",
        "status_badge",
        "protocol_version",
        "oauth_state",
        "last_discovery_at",
        "problem",
    ]
    list_filter = ["transport", "enabled", "status", "protocol_version", "auth"]
    search_fields = ["name", "url", "command"]
    readonly_fields = [
        "status_badge",
        "rejections",
        "last_error",
        "protocol_version",
        "last_discovery_at",
        "created_at",
        "mcplets_listed",
    ]
    actions = ["discover_now"]
    fieldsets = [
        (None, {"fields": ["name", "transport", "enabled"]}),
        ("stdio", {"fields": ["command", "args_line", "env"]}),
        ("streamable HTTP", {"fields": ["url", "headers"]}),
        (
            "Authentication (streamable HTTP)",
            {
                "fields": [
                    "auth",
                    "oauth_connection",
                    "oauth_client_id",
                    "oauth_client_secret",
                    "oauth_scope",
                    "oauth_issuer",
                ]
            },
        ),
        ("State (MGP §11.2 lifecycle)", {"fields": readonly_fields[:-1]}),
        ("MCPlets", {"fields": ["mcplets_listed"]}),
    ]

    # The server's MCPlets on its page: the first of them, and a link to them all (an inline of
    # every one was a form field each: a server of 500 tools could not be saved).
    LISTED = 50

    @admin.display(description="MCPlets")
    def mcplets_listed(self, obj):
        if obj.pk is None:
            return "—"
        mcplets = list(obj.mcplets.order_by("name")[: self.LISTED])
        if not mcplets:
            return "None discovered yet."
        total = obj.mcplets.count() if len(mcplets) == self.LISTED else len(mcplets)
        rows = format_html_join(
            "",
            '<tr><td><a href="{}">{}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>',
            (
                (
                    reverse("admin:pools_mcplet_change", args=[m.pk]),
                    m.name,
                    m.mcplet_type or "—",
                    m.pool_name or "—",
                    m.get_status_display(),
                )
                for m in mcplets
            ),
        )
        everything = reverse("admin:pools_mcplet_changelist") + f"?server__id__exact={obj.pk}"
        return format_html(
            '<table class="mcplets-listed"><thead><tr><th>name</th><th>type</th><th>pool</th>'
            '<th>status</th></tr></thead><tbody>{}</tbody></table><p><a href="{}">{}</a></p>',
            rows,
            everything,
            f"All {total} MCPlets of this server"
            + (f" (the first {self.LISTED} are above)" if total > self.LISTED else ""),
        )

    def get_deleted_objects(self, objs, request):
        """Django's list of what a delete takes with it, each long list cut to LISTED and a
        count (a server of 2,000 tools made a confirmation page of 56,000 lines)."""
        deleted, *rest = super().get_deleted_objects(objs, request)
        return (_cut(deleted, self.LISTED), *rest)

    @admin.action(
        description="Discover now (connect, list and validate the tools)", permissions=["change"]
    )
    def discover_now(self, request, queryset):
        for server in queryset:
            try:
                report = discover(server, timeout=20)
            except ServerUnreachable as exc:
                self.message_user(request, f"{server.name} did not answer: {exc}", messages.ERROR)
            else:
                level = messages.WARNING if report.rejected else messages.SUCCESS
                self.message_user(request, str(report), level)

    def get_queryset(self, request):
        return super().get_queryset(request).with_tool_counts()

    # What a user who may only view reads instead of the sealed values.
    MASKED = {"env": "env_masked", "headers": "headers_masked", "oauth_client_secret": "secret_set"}

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if self.has_change_permission(request, obj):
            return fieldsets
        return [
            (name, {**options, "fields": [self.MASKED.get(f, f) for f in options["fields"]]})
            for name, options in fieldsets
        ]

    @admin.display(description="env")
    def env_masked(self, obj):
        return SecretMappingField("=").masked(obj.env or {}) or "—"

    @admin.display(description="headers")
    def headers_masked(self, obj):
        return SecretMappingField(":").masked(obj.headers or {}) or "—"

    @admin.display(description="OAuth client secret")
    def secret_set(self, obj):
        return "set (never shown)" if obj.oauth_client_secret else "—"

    def get_urls(self):
        return oauth_admin.urls(self) + super().get_urls()

    def get_readonly_fields(self, request, obj=None):
        masked = [] if self.has_change_permission(request, obj) else list(self.MASKED.values())
        return [*super().get_readonly_fields(request, obj), "oauth_connection", *masked]

    @admin.display(description="OAuth connection")
    def oauth_connection(self, obj):
        return oauth_admin.summary(obj)

    @admin.display(description="OAuth")
    def oauth_state(self, obj):
        return obj.oauth_state or "—"

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj):
        colour = {"connected": "green", "error": "#ba2121", obj.WARNING: "#9a5b00"}
        return format_html(
            '<strong style="color:{}">{}</strong>', colour.get(obj.state, "#666"), obj.state_label
        )

    @admin.display(description="problem")
    def problem(self, obj):
        """The list's one line on what is wrong: every tool rejected, or the last error."""
        if obj.all_rejected:
            return self.rejections(obj)
        return (obj.last_error[:80] + "…") if len(obj.last_error) > 80 else obj.last_error

    @admin.display(description="rejected tools")
    def rejections(self, obj):
        if not obj.all_rejected:
            return "—"
        reasons = format_html_join(
            "",
            "<li>{} ({} tool{})</li>",
            ((r, n, "s" if n > 1 else "") for r, n in obj.rejection_reasons()),
        )
        rejected = format_html(
            "Every tool it lists was rejected ({}), so none is routable:<ul>{}</ul>",
            obj.rejected_count,
            reasons,
        )
        if not obj.plain:
            return rejected
        return rejected + format_html(
            "A plain MCP server declares no MCPlet metadata: put the MCPlet adapter in front of "
            "it (<code>python -m mcplets.adapt --suggest -- COMMAND</code> drafts its "
            'configuration); see <a href="{}">Writing an MCPlet</a>, "Connecting an MCP server '
            'that is not an MCPlet".',
            reverse("dashboard:writing-an-mcplet"),
        )


def _cut(nested, limit):
    """Django's nested list of deleted objects (each object, then the list of what it takes
    with it) with each level cut after `limit` objects."""
    if not isinstance(nested, list):
        return nested
    kept, seen = [], 0
    for item in nested:
        seen += not isinstance(item, list)
        if seen > limit:
            break
        kept.append(_cut(item, limit))
    more = sum(not isinstance(item, list) for item in nested) - min(seen, limit)
    return kept + ([f"… and {more} more"] if more > 0 else [])


class VisibilityFilter(admin.SimpleListFilter):
    title = "visibility"
    parameter_name = "visibility"

    def lookups(self, request, model_admin):
        return [("model", "model only"), ("app", "app only"), ("both", "model and app")]

    def queryset(self, request, queryset):
        surfaces = {
            "model": {"model_visible": True, "app_visible": False},
            "app": {"model_visible": False, "app_visible": True},
            "both": {"model_visible": True, "app_visible": True},
        }
        if self.value() in surfaces:
            return queryset.filter(**surfaces[self.value()])
        return queryset


@admin.register(Mcplet)
class McpletAdmin(admin.ModelAdmin):
    """Discovery results: read-only, they change only by discovering again."""

    list_display = [
        "name",
        "server",
        "mcplet_type",
        "pool_name",
        "visibility_list",
        "auth",
        "status",
        "rejection_reason",
    ]
    list_filter = ["status", "mcplet_type", VisibilityFilter, "pool", "server", "auth_enforcement"]
    search_fields = ["name", "title", "description", "pool_name", "rejection_reason"]
    list_select_related = ["server"]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="visibility")
    def visibility_list(self, obj):
        return (
            ", ".join(obj.visibility) if isinstance(obj.visibility, list) else repr(obj.visibility)
        )

    @admin.display(description="auth")
    def auth(self, obj):
        return f"{obj.auth_required} ({obj.auth_enforcement})" if obj.auth_required else "—"
