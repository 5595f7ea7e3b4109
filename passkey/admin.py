import json

from django.contrib import admin, messages
from django.utils.html import format_html

from mcplet_host.admin import IssuedSecretAdmin
from passkey.models import BackendToken, Ceremony, PasskeyCredential


@admin.register(Ceremony)
class CeremonyAdmin(admin.ModelAdmin):
    """Held tool calls: what would run, who asked, and what was decided. Approving needs the
    approver's passkey on the ceremony page; here a call can only be rejected."""

    list_display = [
        "tool_name",
        "agent_id",
        "status",
        "enforcement",
        "created_at",
        "expires_at",
        "decided_by",
    ]
    list_filter = ["status", "enforcement", "tool_name", "agent_id"]
    search_fields = ["tool_name", "agent_id", "provenance__partner", "trace_id", "token"]
    date_hierarchy = "created_at"
    actions = ["reject"]
    fields = [
        "tool_name",
        "server_name",
        "asked_by",
        "surface",
        "arguments_json",
        "prompt_message",
        "enforcement",
        "status",
        "trace_id",
        "rerun_of",
        "created_at",
        "expires_at",
        "decided_by",
        "decided_at",
        "executed_at",
        "result_json",
        "approval_page",
    ]
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="arguments (exactly what will run)")
    def arguments_json(self, obj):
        return format_html("<pre>{}</pre>", json.dumps(obj.arguments, indent=2, ensure_ascii=False))

    @admin.display(description="approval page")
    def approval_page(self, obj):
        if obj.status != Ceremony.Status.PENDING:
            return "—"
        return format_html(
            '<a href="{}">review and approve with a passkey</a>', obj.get_absolute_url()
        )

    @admin.display(description="result")
    def result_json(self, obj):
        return format_html("<pre>{}</pre>", json.dumps(obj.result, indent=2, ensure_ascii=False))

    def has_reject_permission(self, request):
        # Calls are never edited here, but rejecting one is a change: who may change calls may.
        return super().has_change_permission(request)

    @admin.action(
        description="Reject the selected pending calls (nothing runs)", permissions=["reject"]
    )
    def reject(self, request, queryset):
        rejected = sum(
            c.decline(Ceremony.Status.REJECTED, request.user) for c in queryset.pending()
        )
        self.message_user(request, f"{rejected} call(s) rejected.", messages.SUCCESS)


@admin.register(PasskeyCredential)
class PasskeyCredentialAdmin(admin.ModelAdmin):
    """Approvers' passkeys. They are registered by their owners on the passkey page; here they
    are renamed or revoked (a revoked passkey never verifies again)."""

    list_display = ["name", "user", "state", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter), "user"]
    search_fields = ["name", "user__username", "user__email"]
    list_select_related = ["user"]
    actions = ["revoke"]
    fields = ["user", "name", "created_at", "last_used_at", "sign_count", "revoked_at"]
    readonly_fields = ["user", "created_at", "last_used_at", "sign_count", "revoked_at"]

    def has_add_permission(self, request):
        return False  # only the owner's authenticator can create one, on /passkey/register/

    @admin.display(description="state")
    def state(self, obj):
        return obj.state

    @admin.action(description="Revoke the selected passkeys", permissions=["change"])
    def revoke(self, request, queryset):
        count = sum(passkey.revoke(by=request.user) for passkey in queryset)
        self.message_user(request, f"{count} passkey(s) revoked.", messages.SUCCESS)


@admin.register(BackendToken)
class BackendTokenAdmin(IssuedSecretAdmin):
    """Tokens MCP servers use for `POST /auth/verify-assertion`. Created here and shown once;
    afterwards only the prefix identifies them."""

    list_display = ["prefix", "server", "name", "state", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["server", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["prefix", "name", "server__name"]
    list_select_related = ["server"]
    fields = ["server", "name", "prefix", "created_at", "last_used_at", "revoked_at"]

    owner = "server"  # a token's server cannot change once it was handed out
    created_template = "admin/passkey/backendtoken/created.html"

    def issue(self, obj):
        return BackendToken.issue(obj.server, obj.name)
