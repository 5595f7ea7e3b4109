from django.contrib import admin

from a2a.models import A2AMessage, PartnerKey, PushConfig, PushDelivery
from mcplet_host.admin import IssuedSecretAdmin


@admin.register(PartnerKey)
class PartnerKeyAdmin(IssuedSecretAdmin):
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
    fields = ["agent", "name", "expires_at", "prefix", "created_at", "last_used_at", "revoked_at"]

    owner = "agent"  # a key's partner cannot change once it was handed out
    created_template = "admin/a2a/partnerkey/created.html"

    def issue(self, obj):
        return PartnerKey.issue(obj.agent, obj.name, obj.expires_at)


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


class PushDeliveryInline(admin.TabularInline):
    model = PushDelivery
    fields = ["sequence", "kind", "state", "attempts", "next_attempt_at", "last_error", "ended_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(PushConfig)
class PushConfigAdmin(admin.ModelAdmin):
    """Partners' webhooks for their tasks, and what was POSTed to each (A2A push
    notifications). Partners create them; an operator may delete one to stop it."""

    list_display = ["config_id", "partner", "task_id", "url", "created_at"]
    search_fields = ["config_id", "url", "task__sender_id", "task__message_id"]
    list_select_related = ["task"]
    fields = ["config_id", "task", "url", "auth_scheme", "last_status", "created_at"]
    readonly_fields = fields
    inlines = [PushDeliveryInline]

    @admin.display(description="partner")
    def partner(self, obj):
        return obj.task.sender_id

    @admin.display(description="task")
    def task_id(self, obj):
        return obj.task.message_id

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
