import json

from django.contrib import admin, messages
from django.utils.html import format_html
from django.utils.translation import ngettext
from django_celery_beat import admin as beat_admin
from django_celery_beat.models import PeriodicTask

from a2a import outbound
from agents import ending
from agents.forms import AgentForm
from agents.models import Agent, AgentRun
from mcplet_host.forms import FORM_FIELDS


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    formfield_overrides = FORM_FIELDS
    form = AgentForm
    actions = ["refresh_cards"]
    readonly_fields = ["remote_card_json", "card_fetched_at", "asked_pools"]
    list_display = [
        "agent_id",
        "display_name",
        "kind",
        "enabled",
        "granted_pools",
        "model_or_default",
        "hands_off_to",
    ]
    list_filter = ["kind", "enabled", "accessible_pools"]
    search_fields = ["agent_id", "display_name", "description"]
    filter_horizontal = ["accessible_pools", "targets", "callable_agents"]
    raw_id_fields = ["schedule"]
    fieldsets = [
        (
            None,
            {"fields": ["agent_id", "display_name", "description", "kind", "enabled", "version"]},
        ),
        (
            "Pool grants (spec §3.4): the only source of what this agent may call",
            {"fields": ["accessible_pools"]},
        ),
        (
            "LLM agent",
            {"fields": ["system_prompt", "model", "max_steps", "token_budget", "handler"]},
        ),
        (
            "Tools in context (MGP §16): every schema, or discovery inside the grants",
            {"fields": ["tool_mode", "pinned_tools"]},
        ),
        ("Workflow", {"fields": ["hands_off_to", "result_needs_approval", "approval_prompt"]}),
        (
            "Director (kind = director)",
            {
                "fields": [
                    "prompt_template",
                    "targets",
                    "schedule",
                    "max_retries",
                    "backoff_seconds",
                    "overlap_policy",
                    "lock_timeout",
                ],
                "classes": ["collapse"],
            },
        ),
        (
            "Partner (kind = external): the internal agents it may send tasks to",
            {"fields": ["callable_agents", "push_networks", "asked_pools"]},
        ),
        (
            "Partner identity from its issuer (OpenID Connect): tokens it signs work as keys",
            {
                "fields": [
                    "oidc_issuer",
                    "oidc_jwks_url",
                    "oidc_audience",
                    "oidc_claim",
                    "oidc_subject",
                ],
                "classes": ["collapse"],
            },
        ),
        (
            "Remote A2A agent (kind = remote): its card is fetched on every save",
            {"fields": ["card_url", "credentials", "remote_card_json", "card_fetched_at"]},
        ),
        (
            "A2A card (spec §18.2)",
            {"fields": ["input_schema", "output_schema"], "classes": ["collapse"]},
        ),
    ]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .prefetch_related("accessible_pools")
            .select_related("hands_off_to")
        )

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if db_field.name == "callable_agents":  # a partner calls internal agents only (§16.4)
            kwargs["queryset"] = Agent.objects.exclude(
                kind__in=[Agent.Kind.EXTERNAL, Agent.Kind.REMOTE]
            )
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    @admin.action(
        description="Refresh the cards of the selected remote agents", permissions=["change"]
    )
    def refresh_cards(self, request, queryset):
        for agent in queryset.filter(kind=Agent.Kind.REMOTE):
            try:
                agent.refresh_card()
            except outbound.RemoteError as exc:
                self.message_user(request, f"{agent}: {exc}.", messages.ERROR)
            else:
                agent.save(update_fields=["remote_card", "card_fetched_at"])
                self.message_user(request, f"{agent}: card refreshed.", messages.SUCCESS)

    @admin.display(description="accessible pools")
    def granted_pools(self, obj):
        return ", ".join(p.name for p in obj.accessible_pools.all()) or "pool-less MCPlets only"

    @admin.display(description="pools it asks for")
    def asked_pools(self, obj):
        """What a partner's own card (PUT /a2a/agents/me) asks for: shown, never granted."""
        asked = ", ".join(map(str, obj.requested_pools))
        return f"{asked} (from its card: a request, never a grant, §18.1)" if asked else "—"

    @admin.display(description="model")
    def model_or_default(self, obj):
        return obj.model or "(MCPLET_LLM_MODEL)"


@admin.register(AgentRun)
class AgentRunAdmin(admin.ModelAdmin):
    """Runs are the durable state of the agents' work: read here, cancelled with the action."""

    list_display = [
        "short_id",
        "agent",
        "status",
        "context_id",
        "steps",
        "tokens",
        "started_at",
        "finished_at",
    ]
    list_filter = ["status", "agent"]
    search_fields = ["context_id", "agent__agent_id"]
    date_hierarchy = "started_at"
    list_select_related = ["agent"]
    actions = ["cancel_runs"]
    fields = [
        "agent",
        "acts_for",
        "status",
        "context_id",
        "parameters_json",
        "transcript_json",
        "actions_json",
        "discovered_tools",
        "result_json",
        "error_json",
        "steps",
        "prompt_tokens",
        "completion_tokens",
        "waiting_for",
        "started_at",
        "finished_at",
    ]
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    @admin.display(description="acts for")
    def acts_for(self, obj):
        return obj.authority.describe() or "—"

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="run")
    def short_id(self, obj):
        return str(obj.pk)[:8]

    @admin.display(description="tokens")
    def tokens(self, obj):
        return obj.total_tokens

    def has_cancel_permission(self, request):
        # Runs are never edited here, but cancelling one is a change: who may change runs may.
        return super().has_change_permission(request)

    @admin.action(
        description="Cancel the selected runs (a call they wait for is rejected)",
        permissions=["cancel"],
    )
    def cancel_runs(self, request, queryset):
        cancelled = sum(
            ending.cancel(run, f"Cancelled by {request.user.get_username()}.", by=request.user)
            for run in queryset
        )
        self.message_user(
            request,
            ngettext("%d run cancelled.", "%d runs cancelled.", cancelled) % cancelled,
            messages.SUCCESS,
        )


admin.site.unregister(PeriodicTask)


@admin.register(PeriodicTask)
class PeriodicTaskAdmin(beat_admin.PeriodicTaskAdmin):
    """django-celery-beat's (Directors' schedules live there), whose actions — enable, disable,
    toggle, run now — need no permission of their own: here they need the change permission."""

    def get_actions(self, request):
        actions = super().get_actions(request)
        if self.has_change_permission(request):
            return actions
        return {name: action for name, action in actions.items() if name == "delete_selected"}


def _pretty(field, label):
    @admin.display(description=label)
    def show(self, obj):
        value = getattr(obj, field)
        if value is None:  # nothing yet (a new agent has no card): not the JSON word "null"
            return self.get_empty_value_display()
        return format_html("<pre>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False))

    return show


for _field in ("parameters", "transcript", "actions", "result", "error"):
    setattr(AgentRunAdmin, f"{_field}_json", _pretty(_field, _field))
AgentAdmin.remote_card_json = _pretty("remote_card", "its card")
