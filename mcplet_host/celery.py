import os
import threading
from contextlib import contextmanager

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcplet_host.settings")

app = Celery("mcplet_host")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


_import_lock = threading.Lock()


def enqueue(name, args, **options):
    """Queue a task by name (no import of the room that defines it); unlike send_task it
    honours task_always_eager, which commands use in the embedded mode."""
    if name not in app.tasks:  # outside a worker, the rooms' tasks modules load on first use
        with _import_lock:
            if name not in app.tasks:
                app.loader.import_default_modules()
    return app.tasks[name].apply_async(args, **options)


@contextmanager
def run_here_when_embedded():
    """In the embedded mode a command shares no broker with runhost's worker, so the tasks it
    queues run in its own process; with Redis they go to the workers as usual."""
    from django.conf import settings

    if not settings.EMBEDDED:
        yield
        return
    app.conf.task_always_eager = True
    try:
        yield
    finally:
        app.conf.task_always_eager = False
