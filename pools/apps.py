from django.apps import AppConfig


class PoolsConfig(AppConfig):
    name = "pools"
    verbose_name = "MCPlet registry"

    def ready(self):
        from pools import signals  # noqa: F401
