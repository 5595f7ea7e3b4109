"""MCP server credentials (`env`, `headers`) move from clear JSON to sealed text (pools/fields.py)."""

from django.db import migrations

import pools.fields


def seal(apps, schema_editor):
    McpServer = apps.get_model("pools", "McpServer")
    for server in McpServer.objects.all():
        server.env_sealed, server.headers_sealed = server.env or {}, server.headers or {}
        server.save(update_fields=["env_sealed", "headers_sealed"])


def unseal(apps, schema_editor):
    McpServer = apps.get_model("pools", "McpServer")
    for server in McpServer.objects.all():
        server.env, server.headers = server.env_sealed, server.headers_sealed
        server.save(update_fields=["env", "headers"])


class Migration(migrations.Migration):
    dependencies = [("pools", "0004_rediscovery_schedule")]

    operations = [
        migrations.AddField(
            "mcpserver",
            "env_sealed",
            pools.fields.SealedJSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            "mcpserver",
            "headers_sealed",
            pools.fields.SealedJSONField(blank=True, default=dict),
        ),
        migrations.RunPython(seal, unseal),
        migrations.RemoveField("mcpserver", "env"),
        migrations.RemoveField("mcpserver", "headers"),
        migrations.RenameField("mcpserver", "env_sealed", "env"),
        migrations.RenameField("mcpserver", "headers_sealed", "headers"),
        migrations.AlterField(
            "mcpserver",
            "env",
            pools.fields.SealedJSONField(
                blank=True,
                default=dict,
                help_text="stdio: extra environment variables (secret: stored sealed).",
            ),
        ),
        migrations.AlterField(
            "mcpserver",
            "headers",
            pools.fields.SealedJSONField(
                blank=True,
                default=dict,
                help_text="http: request headers, e.g. Authorization (secret: stored sealed).",
            ),
        ),
    ]
