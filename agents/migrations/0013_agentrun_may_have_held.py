from django.db import migrations, models

FINAL = ["success", "error", "timeout", "cancelled", "partial"]


def runs_in_flight_may_have_held(apps, schema_editor):
    """A run that has not ended may have held a call before the flag existed: its end looks."""
    AgentRun = apps.get_model("agents", "AgentRun")
    AgentRun.objects.exclude(status__in=FINAL).update(may_have_held=True)


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0012_push_networks"),
    ]

    operations = [
        migrations.AddField(
            model_name="agentrun",
            name="may_have_held",
            field=models.BooleanField(default=False, editable=False),
        ),
        migrations.RunPython(runs_in_flight_may_have_held, migrations.RunPython.noop),
    ]
