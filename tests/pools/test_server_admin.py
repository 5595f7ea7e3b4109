import html
import re

import pytest

from pools.forms import MASK
from pools.mcp_client import ServerConfig
from pools.models import Mcplet, McpServer

pytestmark = pytest.mark.django_db

SECRET = "Bearer s3cr3t-token-value"


def form(**overrides):
    data = {
        "name": "crm",
        "transport": "http",
        "command": "",
        "args_line": "",
        "env": "",
        "url": "http://localhost:9001/mcp",
        "headers": f"Authorization: {SECRET}",
        "enabled": "on",
    }
    data.update(overrides)
    return data


@pytest.fixture
def server(staff_client):
    response = staff_client.post("/admin/pools/mcpserver/add/", form())
    assert response.status_code == 302, response.content
    return McpServer.objects.get(name="crm")


def test_secret_is_stored_but_never_shown_again(staff_client, server):
    assert server.headers == {"Authorization": SECRET}
    for url in ("/admin/pools/mcpserver/", f"/admin/pools/mcpserver/{server.pk}/change/"):
        page = staff_client.get(url)
        assert page.status_code == 200
        assert b"s3cr3t" not in page.content
    assert MASK.encode() in staff_client.get(f"/admin/pools/mcpserver/{server.pk}/change/").content


def test_leaving_the_mask_keeps_the_secret(staff_client, server):
    url = f"/admin/pools/mcpserver/{server.pk}/change/"
    assert (
        staff_client.post(url, form(headers=f"Authorization: {MASK}\nX-Tenant: 7")).status_code
        == 302
    )
    server.refresh_from_db()
    assert server.headers == {"Authorization": SECRET, "X-Tenant": "7"}


def test_typing_a_value_replaces_it_and_removing_the_line_drops_it(staff_client, server):
    url = f"/admin/pools/mcpserver/{server.pk}/change/"
    staff_client.post(url, form(headers="Authorization: Bearer new"))
    server.refresh_from_db()
    assert server.headers == {"Authorization": "Bearer new"}
    staff_client.post(url, form(headers=""))
    server.refresh_from_db()
    assert server.headers == {}


def test_stdio_server_needs_a_command_and_splits_arguments(staff_client):
    bad = staff_client.post(
        "/admin/pools/mcpserver/add/", form(name="erp", transport="stdio", url="", headers="")
    )
    assert b"A stdio server needs the command to launch." in bad.content
    ok = staff_client.post(
        "/admin/pools/mcpserver/add/",
        form(
            name="erp",
            transport="stdio",
            url="",
            headers="",
            command="python",
            args_line="-m mcplets.restaurant.erp --name 'my shop'",
            env="ERP_TOKEN=abc",
        ),
    )
    assert ok.status_code == 302
    erp = McpServer.objects.get(name="erp")
    assert erp.args == ["-m", "mcplets.restaurant.erp", "--name", "my shop"]
    assert erp.endpoint == "python -m mcplets.restaurant.erp --name my shop"
    assert b"abc" not in staff_client.get(f"/admin/pools/mcpserver/{erp.pk}/change/").content


def test_a_masked_line_without_a_saved_value_is_refused(staff_client):
    page = staff_client.post("/admin/pools/mcpserver/add/", form(headers=f"Authorization: {MASK}"))
    assert b"has no saved value to keep" in page.content


def test_a_plain_url_is_shown_again_a_secret_is_not(staff_client):
    env = (
        "MCPLET_VERIFY_URL=http://localhost:8123/auth/verify-assertion\n"
        "MCPLET_VERIFY_TOKEN=mcpv_abcdef\n"
        "CRM_URL=https://crm.example/api?key=k3y\n"  # a credential in the query
        "DSN=https://bob:pw@db.example/\n"
        "API_KEY_URL=https://keys.example/\n"  # its name says secret
        "REGION=eu-west-1"
    )
    response = staff_client.post(
        "/admin/pools/mcpserver/add/",
        form(name="mailer", transport="stdio", url="", headers="", command="python", env=env),
    )
    assert response.status_code == 302, response.content
    server = McpServer.objects.get(name="mailer")
    url = f"/admin/pools/mcpserver/{server.pk}/change/"
    page = staff_client.get(url).content.decode()
    assert "MCPLET_VERIFY_URL= http://localhost:8123/auth/verify-assertion" in page
    for name, value in (("MCPLET_VERIFY_TOKEN", "abcdef"), ("CRM_URL", "k3y"), ("DSN", "pw@")):
        assert f"{name}= {MASK}" in page and value not in page
    assert f"API_KEY_URL= {MASK}" in page and f"REGION= {MASK}" in page
    # Saving the form as shown keeps every value.
    shown = page.split('name="env"', 1)[1].split(">", 1)[1].split("</textarea>", 1)[0]
    data = form(name="mailer", transport="stdio", url="", headers="", command="python")
    assert staff_client.post(url, data | {"env": html.unescape(shown)}).status_code == 302
    server.refresh_from_db()
    assert server.env["MCPLET_VERIFY_TOKEN"] == "mcpv_abcdef" and len(server.env) == 6


def test_a_stdio_server_is_launched_with_the_hosts_verify_url(settings):
    """Derived when the host launches it, unless the server sets its own: never stored."""
    settings.PASSKEY_ORIGIN, settings.MCPLET_VERIFY_URL = "http://localhost:8123", None
    stdio = McpServer.objects.create(name="mailer", transport="stdio", command="python")
    assert dict(ServerConfig.of(stdio).env) == {
        "MCPLET_VERIFY_URL": "http://localhost:8123/auth/verify-assertion"
    }
    assert McpServer.objects.get(pk=stdio.pk).env == {}
    settings.MCPLET_VERIFY_URL = "http://web:8000/auth/verify-assertion"
    assert dict(ServerConfig.of(stdio).env)["MCPLET_VERIFY_URL"] == settings.MCPLET_VERIFY_URL
    stdio.env = {"MCPLET_VERIFY_URL": "https://elsewhere.example/auth/verify-assertion"}
    assert dict(ServerConfig.of(stdio).env) == stdio.env
    http = McpServer(name="remote", transport="http", url="http://mcplets:9102/mcp")
    assert ServerConfig.of(http).env == ()  # its own environment has it (docker compose)


def test_a_user_who_may_only_view_reads_no_secret(client, server, django_user_model):
    from django.contrib.auth.models import Permission

    server.env = {"API_KEY": "env-s3cr3t"}
    server.auth, server.oauth_client_id = McpServer.Auth.CLIENT_CREDENTIALS, "host"
    server.oauth_client_secret, server.oauth_issuer = "client-s3cr3t", "http://localhost:9001"
    server.headers = {"X-Tenant": "7", "X-Api-Key": "header-s3cr3t"}
    server.save()
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_mcpserver"))
    client.force_login(viewer)
    page = client.get(f"/admin/pools/mcpserver/{server.pk}/change/")
    assert page.status_code == 200
    assert b"s3cr3t" not in page.content
    text = html.unescape(page.content.decode())
    assert f"X-Api-Key: {MASK}" in text and "set (never shown)" in text


def test_the_client_secret_is_kept_when_left_empty_and_never_shown(staff_client, server):
    url = f"/admin/pools/mcpserver/{server.pk}/change/"
    credentials = {
        "headers": "",
        "auth": "client_credentials",
        "oauth_client_id": "host",
        "oauth_issuer": "http://localhost:9001",
    }
    refused = staff_client.post(url, form(**credentials))
    assert b"Client credentials need the client secret." in refused.content
    assert (
        staff_client.post(url, form(**credentials, oauth_client_secret="cs-s3cr3t")).status_code
        == 302
    )
    assert staff_client.post(url, form(**credentials, oauth_scope="read")).status_code == 302
    server.refresh_from_db()
    assert (server.oauth_client_secret, server.oauth_scope) == ("cs-s3cr3t", "read")
    assert b"s3cr3t" not in staff_client.get(url).content
    assert ServerConfig.of(server).credentials == (
        "host",
        "cs-s3cr3t",
        "read",
        "http://localhost:9001",
    )


def test_oauth_is_for_http_servers_and_brings_its_own_authorization_header(staff_client, server):
    url = f"/admin/pools/mcpserver/{server.pk}/change/"
    refused = staff_client.post(url, form(auth="oauth"))  # the form keeps its Authorization
    assert b"With OAuth the host sends its own Authorization header" in refused.content
    assert staff_client.post(url, form(auth="oauth", headers="X-Tenant: 7")).status_code == 302
    server.refresh_from_db()
    assert server.oauth_state == "not connected"


def test_a_server_of_many_tools_is_shown_and_saved(staff_client, server):
    """Its page lists the first MCPlets and links to them all: no form field an MCPlet (a
    server of 500 tools was past DATA_UPLOAD_MAX_NUMBER_FIELDS, and could not be saved)."""
    Mcplet.objects.bulk_create(
        Mcplet(server=server, name=f"tool_{i:04}", mcplet_type="read", status="accepted")
        for i in range(1200)
    )
    url = f"/admin/pools/mcpserver/{server.pk}/change/"
    page = staff_client.get(url).content.decode()
    assert len(re.findall(r'href="/admin/pools/mcplet/\d+/change/"', page)) == 50
    assert "tool_0000" in page and "tool_0050" not in page
    assert f'href="/admin/pools/mcplet/?server__id__exact={server.pk}"' in page
    assert "All 1200 MCPlets of this server" in page
    assert staff_client.post(url, form(url="http://localhost:9002/mcp")).status_code == 302
    server.refresh_from_db()
    assert server.url == "http://localhost:9002/mcp"
    confirm = staff_client.get(f"/admin/pools/mcpserver/{server.pk}/delete/").content.decode()
    assert confirm.count("<li>MCPlet: ") == 50 and "… and 1150 more" in confirm
    assert "<li>MCPlets: 1200</li>" in confirm  # the summary counts them all
