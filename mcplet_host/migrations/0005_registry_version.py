from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("mcplet_host", "0004_recovery_schedules"),
        ("pools", "0008_oauth"),
        ("agents", "0008_waiting_for_held_ceremony"),
    ]

    operations = [
        migrations.CreateModel(
            name="RegistryVersion",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("token", models.CharField(max_length=64)),
            ],
        ),
        # The triggers are (re)installed after every migrate (mcplet_host.registry_triggers):
        # SQLite drops a table's triggers when a later migration rebuilds the table.
    ]
