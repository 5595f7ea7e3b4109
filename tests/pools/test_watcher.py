"""watch_mcplets: the registry follows servers that change their tools at run time."""

import time
from urllib.parse import urlparse

import pytest

from mcplet_host.models import AuditEvent
from mcplets.examples.programmable import serve_http
from pools.models import Mcplet, McpServer
from pools.watcher import start_in_thread
from tests.pools.conftest import tool

pytestmark = pytest.mark.django_db(transaction=True)


def wait_until(predicate, what, timeout=15):
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def routable(server):
    return set(Mcplet.objects.routable().filter(server=server).values_list("name", flat=True))


@pytest.fixture
def watcher():
    stop = start_in_thread(poll_interval=0.2, ping_interval=0.5, timeout=5, max_backoff=0.5)
    yield
    stop()


@pytest.fixture
def listening_watcher():
    """A watcher that checks on quiet servers only every 30 s: a change it follows sooner came
    by notification (2025-11-25) or on the subscription stream (2026-07-28)."""
    stop = start_in_thread(poll_interval=0.2, ping_interval=30, timeout=5, max_backoff=0.5)
    yield
    stop()


def follow_changes(server_spec, server):
    wait_until(lambda: routable(server) == {"query_crm", "query_hr"}, "first discovery")
    server_spec.write(
        [
            tool("query_crm", "action", ("model",)),  # changed _meta: now a forbidden combination
            tool("query_erp"),  # added
        ]
    )  # query_hr removed
    took = wait_until(lambda: routable(server) == {"query_erp"}, "the list_changed re-discovery")
    server.refresh_from_db()
    print(f"{server.transport} {server.protocol_version}: followed in {took * 1000:.0f} ms")
    assert Mcplet.objects.get(server=server, name="query_hr").status == Mcplet.Status.EVICTED
    assert (
        "action visible to the model"
        in Mcplet.objects.get(server=server, name="query_crm").rejection_reason
    )


# 2025-11-25: notifications/tools/list_changed; 2026-07-28: a subscriptions/listen stream.
@pytest.mark.parametrize("protocols", ["2025", "2026"])
def test_follows_list_changed_over_stdio(spec, listening_watcher, protocols):
    crm = spec([tool("query_crm"), tool("query_hr")])
    follow_changes(crm, crm.stdio(protocols=protocols))


@pytest.mark.parametrize("protocols", ["2025", "2026"])
def test_follows_list_changed_over_http(spec, http_server, listening_watcher, protocols):
    crm = spec([tool("query_crm"), tool("query_hr")])
    follow_changes(crm, http_server(crm, protocols=protocols))


def test_picks_up_servers_added_and_disabled_in_admin(spec, watcher):
    erp = spec([tool("query_erp")], name="erp").stdio()
    wait_until(lambda: routable(erp) == {"query_erp"}, "a server added while running")
    McpServer.objects.filter(pk=erp.pk).update(enabled=False)
    wait_until(
        lambda: McpServer.objects.get(pk=erp.pk).status == McpServer.Status.DISCONNECTED,
        "a disabled server to be disconnected",
    )
    assert AuditEvent.objects.filter(event_type="SERVER_DISCONNECTED", target_server="erp").exists()


def test_reconnects_after_the_server_drops(spec, watcher):
    crm = spec([tool("query_crm")])
    with serve_http(crm.path) as url:
        server = McpServer.objects.create(name="crm", transport="http", url=url)
        wait_until(lambda: routable(server) == {"query_crm"}, "first discovery")
    port = urlparse(url).port
    wait_until(
        lambda: McpServer.objects.get(pk=server.pk).status == McpServer.Status.ERROR, "the drop"
    )
    assert routable(server) == {"query_crm"}  # tools stay; the gateway answers SERVICE_UNAVAILABLE

    crm.write([tool("query_crm"), tool("query_hr")])
    with serve_http(crm.path, port=port):
        wait_until(lambda: routable(server) == {"query_crm", "query_hr"}, "the reconnection")
        assert McpServer.objects.get(pk=server.pk).status == McpServer.Status.CONNECTED
    kinds = list(
        AuditEvent.objects.filter(target_server="crm")
        .order_by("seq")
        .values_list("event_type", flat=True)
    )
    assert kinds.count("SERVER_CONNECTED") == 2 and "SERVER_DISCONNECTED" in kinds


@pytest.mark.parametrize("protocols", ["2025", "2026"])
def test_a_quiet_server_is_checked_not_rediscovered(spec, watcher, protocols):
    """Past the first quiet interval's re-list, a quiet 2025-11-25 session gets a ping and a
    2026-07-28 one its (cached) list: neither is discovered again while nothing changes."""
    crm = spec([tool("query_crm")]).stdio(protocols=protocols)
    wait_until(lambda: routable(crm) == {"query_crm"}, "first discovery")
    time.sleep(1.5)  # the first quiet interval (0.5 s) re-lists once
    discovered = McpServer.objects.get(pk=crm.pk).last_discovery_at
    time.sleep(2.5)  # five more quiet intervals
    assert McpServer.objects.get(pk=crm.pk).last_discovery_at == discovered
