"""`seed_reference` used to store the strict reference MCPlets' MCPLET_VERIFY_URL with a guessed
port (PASSKEY_ORIGIN's default, 8000); the host now derives it when it launches them
(pools.mcp_client.verify_url). Drop that stored default so a host on another port is reached."""

from django.db import migrations

SEEDED = "http://localhost:8000/auth/verify-assertion"
REFERENCE_STRICT_SERVERS = ("restaurant-mail", "restaurant-sns")


def derive_at_launch(apps, schema_editor):
    McpServer = apps.get_model("pools", "McpServer")
    for server in McpServer.objects.filter(name__in=REFERENCE_STRICT_SERVERS):
        if (server.env or {}).get("MCPLET_VERIFY_URL") == SEEDED:
            server.env = {k: v for k, v in server.env.items() if k != "MCPLET_VERIFY_URL"}
            server.save(update_fields=["env"])


class Migration(migrations.Migration):
    dependencies = [("pools", "0005_seal_server_credentials")]

    operations = [migrations.RunPython(derive_at_launch, migrations.RunPython.noop)]
