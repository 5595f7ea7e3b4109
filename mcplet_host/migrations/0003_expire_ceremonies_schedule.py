from django.db import migrations


def create(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    every_30_seconds, _ = IntervalSchedule.objects.get_or_create(every=30, period="seconds")
    PeriodicTask.objects.get_or_create(
        name="Expire unapproved tool calls",
        defaults={
            "task": "mcplet_host.expire_ceremonies",
            "interval": every_30_seconds,
            "description": "Held calls nobody approved before their expiry are resolved as "
            "expired: nothing runs, and the waiting agent run continues with the error.",
        },
    )


def remove(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(name="Expire unapproved tool calls").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("mcplet_host", "0002_heartbeat_schedule"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]
    operations = [migrations.RunPython(create, remove)]
