import pytest

from pools.forms import MASK
from pools.models import McpServer

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
        # the read-only MCPlet inline's management form
        "mcplets-TOTAL_FORMS": "0",
        "mcplets-INITIAL_FORMS": "0",
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
