from django.contrib import admin

from agents.models import Agent


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["agent_id", "display_name", "kind", "enabled", "granted_pools", "version"]
    list_filter = ["kind", "enabled", "accessible_pools"]
    search_fields = ["agent_id", "display_name", "description"]
    filter_horizontal = ["accessible_pools"]
    fieldsets = [
        (
            None,
            {"fields": ["agent_id", "display_name", "description", "kind", "enabled", "version"]},
        ),
        ("Pool grants (spec §3.4)", {"fields": ["accessible_pools"]}),
        (
            "A2A card (spec §18.2)",
            {"fields": ["input_schema", "output_schema"], "classes": ["collapse"]},
        ),
    ]

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("accessible_pools")

    @admin.display(description="accessible pools")
    def granted_pools(self, obj):
        return ", ".join(p.name for p in obj.accessible_pools.all()) or "pool-less MCPlets only"
