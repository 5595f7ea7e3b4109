import json

from django.contrib import admin, messages
from django.contrib.admin.utils import model_ngettext
from django.template.response import TemplateResponse
from django.utils.html import format_html

from mcplet_host.models import AuditEvent


class IssuedSecretAdmin(admin.ModelAdmin):
    """Bearer secrets the host issues (partner keys, verify-assertion tokens): created here,
    stored as a hash, shown once in the response to the add form; afterwards only the prefix
    identifies one, and it can only be revoked. Subclasses name the `owner` field (fixed once
    handed out), the `created_template` and implement `issue(obj) -> (saved, raw secret)`."""

    owner = ""
    created_template = ""
    readonly_fields = ["prefix", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke_selected"]

    def issue(self, obj):
        raise NotImplementedError

    def get_readonly_fields(self, request, obj=None):
        if obj is not None:
            return [*self.readonly_fields, self.owner]
        return self.readonly_fields

    @admin.display(description="state")
    def state(self, obj):
        return obj.state

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        saved, raw = self.issue(obj)
        obj.pk, obj.prefix = saved.pk, saved.prefix
        request._issued_secret = raw

    def response_add(self, request, obj, post_url_continue=None):
        # Render the secret in this response only: it is in no message, session or log.
        return TemplateResponse(
            request,
            self.created_template,
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "issued": obj,
                "raw": request._issued_secret,
                "title": f"{self.model._meta.verbose_name.capitalize()} created for "
                f"{getattr(obj, self.owner)}",
            },
        )

    @admin.action(description="Revoke the selected %(verbose_name_plural)s", permissions=["change"])
    def revoke_selected(self, request, queryset):
        count = 0
        for issued in queryset.filter(revoked_at__isnull=True):
            issued.revoke()
            count += 1
        noun = model_ngettext(self.model._meta, count)
        self.message_user(request, f"{count} {noun} revoked.", messages.SUCCESS)


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
