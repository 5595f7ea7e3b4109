"""MCP server credentials are sealed at rest: the database (and so its dumps and backups) never
holds an API key or bearer token in clear, and a rotated SECRET_KEY still reads them while the
old key is a fallback."""

import io

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from pools.mcp_client import ServerConfig
from pools.models import McpServer

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "sk-live-0123456789abcdef"


def stored(server):
    with connection.cursor() as cursor:
        cursor.execute("SELECT env, headers FROM pools_mcpserver WHERE id = %s", [server.pk])
        return cursor.fetchone()


@pytest.fixture
def servers():
    return (
        McpServer.objects.create(
            name="crm", transport="stdio", command="python", env={"CRM_TOKEN": TOKEN}
        ),
        McpServer.objects.create(
            name="weather",
            transport="http",
            url="http://weather:9000/mcp",
            headers={"Authorization": f"Bearer {TOKEN}"},
        ),
    )


def test_the_database_holds_no_credential_in_clear(servers):
    crm, weather = servers
    for server in servers:
        assert all(TOKEN not in column for column in stored(server))
    assert McpServer.objects.get(pk=crm.pk).env == {"CRM_TOKEN": TOKEN}
    config = ServerConfig.of(McpServer.objects.get(pk=weather.pk))
    assert dict(config.headers) == {"Authorization": f"Bearer {TOKEN}"}
    dump = io.StringIO()
    call_command("dumpdata", "pools.mcpserver", stdout=dump)
    assert TOKEN not in dump.getvalue()


def test_a_rotated_secret_key_reads_them_while_the_old_one_is_a_fallback(servers, settings):
    crm, _ = servers
    old = settings.SECRET_KEY
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "the-new-key", [old]
    assert McpServer.objects.get(pk=crm.pk).env == {"CRM_TOKEN": TOKEN}
    McpServer.objects.get(pk=crm.pk).save()  # re-sealed under the new key
    settings.SECRET_KEY_FALLBACKS = []
    assert McpServer.objects.get(pk=crm.pk).env == {"CRM_TOKEN": TOKEN}
    settings.SECRET_KEY = "yet-another-key"
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY_FALLBACKS"):
        McpServer.objects.get(pk=crm.pk)


def test_the_migration_seals_what_was_stored_in_clear():
    executor = MigrationExecutor(connection)
    before, after = (
        [("pools", "0004_rediscovery_schedule")],
        [("pools", "0005_seal_server_credentials")],
    )
    executor.migrate(before)
    old = executor.loader.project_state(before).apps.get_model("pools", "McpServer")
    server = old.objects.create(
        name="legacy", transport="stdio", command="python", env={"LEGACY_TOKEN": TOKEN}
    )
    executor.loader.build_graph()
    executor.migrate(after)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert TOKEN not in stored(server)[0]
    assert McpServer.objects.get(pk=server.pk).env == {"LEGACY_TOKEN": TOKEN}
