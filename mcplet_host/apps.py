from django.apps import AppConfig
from django.db.models.signals import post_migrate


class McpletHostConfig(AppConfig):
    name = "mcplet_host"
    verbose_name = "Host core (audit trail)"

    def ready(self):
        from mcplet_host import config_audit, registry, startup

        config_audit.connect()
        startup.settled()  # every app's models are loaded by now

        post_migrate.connect(registry.install_triggers, sender=self)
