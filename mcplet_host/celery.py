import importlib
import os
import select
import threading
from collections.abc import Mapping
from contextlib import contextmanager
from functools import cached_property

from celery import Celery, concurrency, signals

from mcplet_host import startup, tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcplet_host.settings")


class DjangoSettings(Mapping):
    """Django's `CELERY_` settings, read once, when Celery loads its configuration: Django's
    settings do not change while a process runs. Celery looks a setting up at each use, under
    each of its names in each of its sources, and on Django's settings object each name not
    set there raised an AttributeError: a sixth of the CPU of a task's publish."""

    @cached_property
    def _read(self):
        from django.conf import settings

        names = [name for name in dir(settings) if name.startswith("CELERY_")]
        return {name: getattr(settings, name) for name in names}

    def __getitem__(self, name):
        return self._read[name]

    def __iter__(self):
        return iter(self._read)

    def __len__(self):
        return len(self._read)


app = Celery("mcplet_host")
app.config_from_object(DjangoSettings(), namespace="CELERY")
app.autodiscover_tasks()


@signals.task_prerun.connect
def check_database_connections(task=None, **kwargs):
    """What Django does at each request, at each task of a worker: close a connection that
    broke or aged out, and have a kept one health-checked at its first use (CELERY_DB_REUSE_MAX
    keeps it across tasks; without this, a connection the server dropped failed every task
    after). A kept connection that is quiet needs no `SELECT 1` round trip. Not for a task run
    eagerly: it runs inside its caller's work."""
    if task is not None and task.request.is_eager:
        return
    from django.db import close_old_connections, connections

    close_old_connections()
    for wrapper in connections.all(initialized_only=True):
        if wrapper.vendor == "postgresql" and quiet(wrapper.connection):
            wrapper.health_check_done = True


def quiet(raw):
    """A PostgreSQL connection idle, with nothing to read. One the server terminated or closed
    (a restart, pg_terminate_backend) has its error and its end waiting on the socket: it is
    not quiet, and Django's check finds it broken and replaces it."""
    from psycopg import pq

    try:
        if raw is None or raw.closed or raw.info.transaction_status != pq.TransactionStatus.IDLE:
            return False
        poller = select.poll()
        poller.register(raw.fileno(), select.POLLIN)
        return not poller.poll(0)
    except Exception:  # whatever it is, Django's own check decides
        return False


@signals.worker_init.connect
def load_the_mcp_sdk(sender, **kwargs):
    """The host loads the MCP SDK at its first call, so that start-up stays fast. A worker's
    threads would all load it at their first call at once, and a module one thread is still
    loading is half there for another (an ImportError the fault harness saw): a worker loads
    it before its pool starts."""
    with startup.loading():
        for module in (
            "mcp",
            "mcp.client.stdio",
            "mcp.client.streamable_http",
            "mcp.server.mcpserver",
            "mcp.shared.exceptions",
            "mcp_types",
        ):
            importlib.import_module(module)
    if "prefork" in concurrency.get_implementation(sender.pool_cls).__module__:
        # Once, before the children fork: they start with it loaded, sharing its memory.
        _load_the_llm_client()


@signals.worker_init.connect
def trace_a_worker(sender, **kwargs):
    """A worker of threads traces in its own process; a prefork parent runs no task, and its
    children set up their own provider (an exporter's thread does not survive a fork)."""
    if "prefork" not in concurrency.get_implementation(sender.pool_cls).__module__:
        tracing.setup()


@signals.worker_process_init.connect
def trace_a_child(**kwargs):
    tracing.setup()


@signals.worker_init.connect
def remove_ended_processes_metrics(**kwargs):
    """In multiprocess mode, the files of this host's ended processes (docs/metrics.md)."""
    from mcplet_host import metrics

    metrics.remove_dead_files()


def _load_the_llm_client():
    """litellm takes seconds to import, the A2A schemas a tenth of one to compile: a worker
    loads them as it starts, not at the first LLM call or message it handles (a Director's
    "Run now" would wait for them)."""
    from a2a import schemas
    from agents import llm

    with startup.loading():
        llm.load()
        schemas.schema("task-request")


@signals.worker_ready.connect
def warm_the_sessions_of_a_thread_pool(sender=None, **kwargs):
    """A worker of threads (runhost's, the tests') calls from this process: its sessions to
    the enabled MCP servers open as it starts, not at its first call to each."""
    if "prefork" not in type(getattr(sender, "pool", None)).__module__:
        _warm_sessions()


@signals.worker_process_init.connect
def warm_the_sessions_of_a_child(**kwargs):
    """A prefork child calls from its own process: the same, in each child."""
    _warm_sessions()


def _warm_sessions():
    def warm():
        from django.db import connections

        from pools.sessions import sessions
        from pools.watcher import enabled_configs

        try:
            sessions.warm(enabled_configs().values())
        finally:
            connections.close_all()  # this thread's own
        _load_the_llm_client()  # a thread pool's (a prefork child has it from its parent)

    threading.Thread(target=warm, name="mcp-warm", daemon=True).start()


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
