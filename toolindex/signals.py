"""The index follows the registry: what discovery lists, an MCPlet saved, a server renamed."""

from django.db.models.signals import post_save
from django.dispatch import receiver

from pools.models import Mcplet, McpServer
from pools.signals import tools_listed
from toolindex import index


@receiver(tools_listed)
def index_listed_tools(sender, server, mcplets, **kwargs):
    for mcplet in mcplets:
        mcplet.server = server
    index.reindex(mcplets)


@receiver(post_save, sender=Mcplet)
def index_saved_tool(sender, instance, raw=False, **kwargs):
    if not raw:
        index.reindex([instance])


@receiver(post_save, sender=McpServer)
def index_renamed_server(sender, instance, update_fields=None, raw=False, **kwargs):
    """The server's name is one of its tools' categories."""
    if not raw and (update_fields is None or "name" in update_fields):
        index.reindex(instance.mcplets.select_related("server"))
