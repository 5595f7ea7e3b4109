import json

from django.contrib import admin
from django.utils.html import format_html

from mcplet_host.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """The audit trail is append-only: it can be read and filtered, never edited here."""

    list_display = [
        "seq",
        "timestamp",
        "event_type",
        "actor",
        "target_tool",
        "target_server",
        "result",
        "trace_id",
    ]
    list_filter = [
        "event_type",
        "actor_type",
        "result",
        ("actor_id", admin.AllValuesFieldListFilter),
        ("target_tool", admin.AllValuesFieldListFilter),
        "timestamp",
    ]
    search_fields = ["trace_id", "actor_id", "target_tool", "target_server", "event_type"]
    date_hierarchy = "timestamp"
    fields = [
        "seq",
        "timestamp",
        "trace_id",
        "event_type",
        "actor_type",
        "actor_id",
        "target_server",
        "target_tool",
        "result",
        "details_json",
        "prev_hash",
        "hash",
    ]
    readonly_fields = fields

    @admin.display(description="actor", ordering="actor_id")
    def actor(self, obj):
        return f"{obj.actor_type}:{obj.actor_id}" if obj.actor_id else obj.actor_type

    @admin.display(description="details")
    def details_json(self, obj):
        return format_html("<pre>{}</pre>", json.dumps(obj.details, indent=2, sort_keys=True))

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
