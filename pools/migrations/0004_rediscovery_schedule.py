from django.db import migrations


def create(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    every_5_minutes, _ = IntervalSchedule.objects.get_or_create(every=5, period="minutes")
    PeriodicTask.objects.get_or_create(
        name="Re-discover MCP servers",
        defaults={
            "task": "pools.rediscover_all",
            "interval": every_5_minutes,
            "description": "Safety net for servers that never send tools/list_changed; the "
            "watcher follows the others as they change.",
        },
    )


def remove(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(name="Re-discover MCP servers").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("pools", "0003_mcp_server_url_single_label_hosts"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]
    operations = [migrations.RunPython(create, remove)]
