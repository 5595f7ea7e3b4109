from django.apps import AppConfig


class McpletHostConfig(AppConfig):
    name = "mcplet_host"
    verbose_name = "Host core (audit trail)"
