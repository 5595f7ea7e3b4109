from django.apps import AppConfig


class PoolsConfig(AppConfig):
    name = "pools"
    verbose_name = "MCPlet registry"

    def ready(self):
        from mcplet_host import config_audit as config
        from pools import signals  # noqa: F401
        from pools.models import McpServer, Pool

        config.track(
            Pool, "pool", grants=lambda pool: {"held by": sorted(str(a) for a in pool.agents.all())}
        )
        config.track(
            McpServer, "server", secret=("env", "headers", "oauth_client_secret"), server="name"
        )
