from contextlib import suppress

from celery import shared_task

from pools.discovery import discover
from pools.mcp_client import ServerUnreachable
from pools.models import McpServer


@shared_task(name="pools.discover_server", ignore_result=True)
def discover_server(server_id):
    """Discover one server now; a server that is down keeps its tools (and shows the error)."""
    server = McpServer.objects.filter(pk=server_id, enabled=True).first()
    if server is None:
        return
    with suppress(ServerUnreachable):  # discover() records the error on the server and audits it
        discover(server)


@shared_task(name="pools.rediscover_all", ignore_result=True)
def rediscover_all():
    """Safety net for servers without listChanged: beat runs it periodically."""
    for server_id in McpServer.objects.filter(enabled=True).values_list("pk", flat=True):
        discover_server.delay(server_id)
