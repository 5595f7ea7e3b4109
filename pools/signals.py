from django.db import transaction
from django.db.models.signals import post_save
from django.dispatch import Signal, receiver

from pools.models import Mcplet, McpServer, Pool

# Sent by discovery, in its transaction, with the MCPlets it created or changed (bulk writes,
# which send no post_save): what keeps the tool index current.
tools_listed = Signal()


@receiver(post_save, sender=Pool)
def rediscover_tools_waiting_for_pool(sender, instance, created, **kwargs):
    """§5.3.3: tools naming a pool the host did not know are re-validated once it exists, and
    accepted tools that declare it (their pool deleted, or renamed away) belong to it again."""
    Mcplet.objects.filter(pool_name=instance.name).exclude(pool=instance).update(pool=instance)
    servers = list(
        McpServer.objects.filter(
            enabled=True,
            mcplets__pool_name=instance.name,
            mcplets__status=Mcplet.Status.REJECTED,
        )
        .distinct()
        .values_list("pk", flat=True)
    )
    if servers:
        from pools.tasks import discover_server

        transaction.on_commit(lambda: [discover_server.delay(pk) for pk in servers])
