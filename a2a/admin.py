from django.contrib import admin, messages
from django.template.response import TemplateResponse

from a2a.models import A2AMessage, PartnerKey


@admin.register(PartnerKey)
class PartnerKeyAdmin(admin.ModelAdmin):
    """Keys are created here and shown once; afterwards only the prefix identifies them."""

    list_display = [
        "prefix",
        "agent",
        "name",
        "state",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    ]
    list_filter = ["agent", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["prefix", "name", "agent__agent_id"]
    list_select_related = ["agent"]
    actions = ["revoke_keys"]
    fields = ["agent", "name", "expires_at", "prefix", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "created_at", "last_used_at", "revoked_at"]

    def get_readonly_fields(self, request, obj=None):
        if obj is not None:  # a key's owner cannot be changed after it was handed out
            return [*self.readonly_fields, "agent"]
        return self.readonly_fields

    @admin.display(description="state")
    def state(self, obj):
        return obj.state

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        key, raw = PartnerKey.issue(obj.agent, obj.name, obj.expires_at)
        obj.pk, obj.prefix = key.pk, key.prefix
        request._partner_key_raw = raw

    def response_add(self, request, obj, post_url_continue=None):
        # Render the key in this response only: it is in no message, session or log.
        return TemplateResponse(
            request,
            "admin/a2a/partnerkey/created.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "key": obj,
                "raw_key": request._partner_key_raw,
                "title": "Partner key created",
            },
        )

    @admin.action(description="Revoke the selected keys")
    def revoke_keys(self, request, queryset):
        count = 0
        for key in queryset.filter(revoked_at__isnull=True):
            key.revoke()
            count += 1
        self.message_user(request, f"{count} key(s) revoked.", messages.SUCCESS)


@admin.register(A2AMessage)
class A2AMessageAdmin(admin.ModelAdmin):
    """The A2A trace: every task request and response, as sent."""

    list_display = [
        "created_at",
        "type",
        "sender_id",
        "recipient_id",
        "state",
        "status",
        "context_id",
        "external",
    ]
    list_filter = ["type", "state", "status", "external", "sender_id", "recipient_id"]
    search_fields = ["message_id", "context_id", "sender_id", "recipient_id"]
    date_hierarchy = "created_at"

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
