import json

from django.contrib import admin, messages
from django.utils.html import format_html

from passkey.models import Ceremony


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
    search_fields = ["tool_name", "agent_id", "partner_id", "trace_id", "token"]
    date_hierarchy = "created_at"
    actions = ["reject"]
    fields = [
        "tool_name",
        "server_name",
        "agent_id",
        "partner_id",
        "surface",
        "arguments_json",
        "prompt_message",
        "enforcement",
        "status",
        "trace_id",
        "created_at",
        "expires_at",
        "decided_by",
        "decided_at",
        "executed_at",
        "result_json",
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

    @admin.display(description="result")
    def result_json(self, obj):
        return format_html("<pre>{}</pre>", json.dumps(obj.result, indent=2, ensure_ascii=False))

    @admin.action(description="Reject the selected pending calls (nothing runs)")
    def reject(self, request, queryset):
        rejected = sum(
            c.decline(Ceremony.Status.REJECTED, request.user) for c in queryset.pending()
        )
        self.message_user(request, f"{rejected} call(s) rejected.", messages.SUCCESS)
