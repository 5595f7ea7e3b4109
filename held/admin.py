import json

from django.contrib import admin, messages
from django.utils.html import format_html
from django.utils.translation import ngettext

from held.models import Ceremony


@admin.register(Ceremony)
class CeremonyAdmin(admin.ModelAdmin):
    """Held calls: what would run, who asked, and what was decided. Approving needs the
    approver's passkey on the ceremony page; here a call can only be rejected."""

    list_display = [
        "tool_name",
        "kind",
        "agent_id",
        "status",
        "enforcement",
        "created_at",
        "expires_at",
        "decided_by",
    ]
    list_filter = ["kind", "status", "enforcement", "tool_name", "agent_id"]
    search_fields = ["tool_name", "agent_id", "provenance__partner", "trace_id", "token"]
    date_hierarchy = "created_at"
    actions = ["reject"]
    fields = [
        "kind",
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
        if obj.result is None:  # not run yet: nothing, rather than the JSON word "null"
            return self.get_empty_value_display()
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
        self.message_user(
            request,
            ngettext("%d call rejected.", "%d calls rejected.", rejected) % rejected,
            messages.SUCCESS,
        )
