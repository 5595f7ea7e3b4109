"""Connect… and Disconnect are an operator's: a user who may only view servers gets 403 and
changes nothing; a server that is not OAuth is not connected by URL-guessing."""

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from pools.models import McpServer
from pools.oauth.models import OAuthGrant

pytestmark = pytest.mark.django_db


@pytest.fixture
def server():
    server = McpServer.objects.create(
        name="tracker", transport="http", url="http://127.0.0.1:9/mcp", auth="oauth"
    )
    OAuthGrant.objects.create(
        server=server,
        status="connected",
        issuer="http://127.0.0.1:9",
        resource="http://127.0.0.1:9/mcp",
        connected_at=timezone.now(),
        secret={"tokens": {"access_token": "at-s3cret"}, "client": {"client_id": "c"}},
    )
    return server


def urls(server):
    base = f"/admin/pools/mcpserver/{server.pk}/oauth"
    return f"{base}/connect/", f"{base}/disconnect/"


def test_a_viewer_can_neither_connect_nor_disconnect(client, server, django_user_model):
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_mcpserver"))
    client.force_login(viewer)
    connect, disconnect = urls(server)
    for url in (connect, disconnect):
        assert client.get(url).status_code == 403
        assert client.post(url).status_code == 403
    assert OAuthGrant.objects.get(server=server).access_token == "at-s3cret"


def test_the_pages_explain_and_never_show_a_token(staff_client, server, settings):
    settings.PASSKEY_ORIGIN = "http://localhost:8000"
    connect, disconnect = urls(server)
    page = staff_client.get(connect).content.decode()
    assert "http://localhost:8000/oauth/callback" in page
    assert "a client registration it makes" in page  # an http origin: no CIMD
    assert "asked-scopes" not in page
    OAuthGrant.objects.filter(server=server).update(asked_scopes="<b>admin</b> write")
    page = staff_client.get(connect).content.decode()
    assert "It also asks for <code>&lt;b&gt;admin&lt;/b&gt; write</code>" in page
    assert "Yes, disconnect" in staff_client.get(disconnect).content.decode()
    change = staff_client.get(f"/admin/pools/mcpserver/{server.pk}/change/").content.decode()
    assert "Reconnect…" in change and "Disconnect" in change
    assert all("at-s3cret" not in p for p in (page, change))


def test_a_server_without_oauth_is_not_connected(staff_client, server):
    server.auth = McpServer.Auth.NONE
    server.save()
    response = staff_client.post(urls(server)[0], follow=True)
    assert b"does not use OAuth (authorization code)" in response.content
