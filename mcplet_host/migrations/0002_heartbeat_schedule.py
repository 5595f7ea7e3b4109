from django.db import migrations


def create(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    every_minute, _ = IntervalSchedule.objects.get_or_create(every=60, period="seconds")
    PeriodicTask.objects.get_or_create(
        name="Host heartbeat",
        defaults={
            "task": "mcplet_host.heartbeat",
            "interval": every_minute,
            "description": "Shows that beat, the broker and a worker are all running.",
        },
    )


def remove(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name="Host heartbeat").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("mcplet_host", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]
    operations = [migrations.RunPython(create, remove)]
