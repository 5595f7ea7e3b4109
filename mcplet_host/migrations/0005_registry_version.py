from django.db import migrations, models


def drop_triggers(apps, schema_editor):
    from mcplet_host import registry

    registry.drop_triggers(schema_editor.connection)


class Migration(migrations.Migration):
    # No dependency on the watched apps: migrating one of them back must not take this table,
    # which their tables' triggers write to, away from under them.
    dependencies = [("mcplet_host", "0004_recovery_schedules")]

    operations = [
        migrations.CreateModel(
            name="RegistryVersion",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("token", models.CharField(max_length=64)),
            ],
        ),
        # The triggers are (re)installed after every migrate (mcplet_host.registry): SQLite
        # drops a table's triggers when a later migration rebuilds the table. Migrating this
        # back drops them first, so no write meets a trigger whose table is gone.
        migrations.RunPython(migrations.RunPython.noop, drop_triggers),
    ]
