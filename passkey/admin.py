from django.contrib import admin, messages
from django.utils.translation import ngettext

from mcplet_host.admin import IssuedSecretAdmin
from passkey.models import BackendToken, PasskeyCredential


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
        self.message_user(
            request,
            ngettext("%d passkey revoked.", "%d passkeys revoked.", count) % count,
            messages.SUCCESS,
        )


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
