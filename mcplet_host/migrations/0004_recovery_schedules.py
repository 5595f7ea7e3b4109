from django.db import migrations

SCHEDULES = {
    "Recover lost agent work": (
        "agents.recover",
        "Task requests never delivered, runs no worker holds any more and runs still waiting on "
        "a decided call are queued again (a worker killed, the broker's data lost).",
    ),
    "Recover lost tool calls": (
        "mcplet_host.recover_calls",
        "Decided calls whose task was lost are queued again; a call whose worker died while "
        "running it is settled as outcome-unknown (never sent again).",
    ),
}


def create(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    every_30_seconds, _ = IntervalSchedule.objects.get_or_create(every=30, period="seconds")
    for name, (task, description) in SCHEDULES.items():
        PeriodicTask.objects.get_or_create(
            name=name,
            defaults={"task": task, "interval": every_30_seconds, "description": description},
        )


def remove(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(name__in=SCHEDULES).delete()


class Migration(migrations.Migration):
    dependencies = [("mcplet_host", "0003_expire_ceremonies_schedule")]
    operations = [migrations.RunPython(create, remove)]
