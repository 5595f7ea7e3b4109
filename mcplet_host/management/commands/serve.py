"""`manage.py serve`: the web tier as separate processes (compose's `web`)."""

import os
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from mcplet_host import metrics

APPLICATION = "mcplet_host.asgi:application"
# Connections each web process keeps to PostgreSQL, unless DB_POOL_MAX_SIZE says otherwise.
WEB_DB_POOL = 10


def uvicorn_command(app, host, port, processes):
    """uvicorn's command line: `processes` workers sharing one listening socket (a supervisor
    starts them, and again when one dies), each serving HTTP and websockets. The ASGI app has
    no lifespan handler (Channels' router refuses the scope), and no proxy header is trusted: a
    TLS proxy in front sets what Django's settings say (as under daphne)."""
    command = [sys.executable, "-m", "uvicorn", app, "--host", host, "--port", str(port)]
    command += ["--workers", str(processes), "--lifespan", "off", "--no-proxy-headers"]
    # Below compose's 10 s stop grace: open websockets are closed, a running view may finish.
    command += ["--timeout-graceful-shutdown", "5", "--no-access-log"]
    return command


class Command(BaseCommand):
    help = (
        "Serve the web app (pages, admin, APIs, websockets) with MCPLET_WEB_PROCESSES uvicorn "
        "worker processes on MCPLET_PORT. The worker, beat and watcher run as their own "
        "processes; `runhost` runs everything in one."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--host", default="127.0.0.1", help="Interface to bind (default 127.0.0.1)."
        )
        parser.add_argument(
            "--port",
            type=int,
            default=settings.MCPLET_PORT,
            help="Port to serve (default MCPLET_PORT, 8000).",
        )
        parser.add_argument(
            "--processes",
            type=int,
            default=settings.MCPLET_WEB_PROCESSES,
            help="Worker processes (default MCPLET_WEB_PROCESSES, 2).",
        )
        parser.add_argument(
            "--app",
            default=APPLICATION,
            help=f"The ASGI application's import string (default {APPLICATION}; benchmarks "
            "load one that wraps it).",
        )

    def handle(self, *args, host, port, processes, app, **options):
        if processes < 1:
            raise CommandError("--processes must be at least 1.")
        if processes > 1 and settings.EMBEDDED:
            # Each process would have a cache, channel layer and broker of its own: a challenge
            # issued by one is unknown to the next, a live event reaches one process's sockets.
            raise CommandError(
                f"{processes} web processes need REDIS_URL (they share the cache, the channel "
                "layer and the broker through Redis): set it, or MCPLET_WEB_PROCESSES=1, or run "
                "the embedded host with `manage.py runhost`."
            )
        command = uvicorn_command(app, host, port, processes)
        self.stdout.write(
            f"MCPlet Host web on http://{host}:{port}/ — {processes} process"
            f"{'es' if processes > 1 else ''} (uvicorn)"
        )
        self.stdout.flush()
        # uvicorn in this process's place: the supervisor gets the signals a service manager
        # sends, and Django's import here costs it no memory. Its workers watch it (asgi.py).
        os.environ["MCPLET_WEB_SUPERVISOR"] = str(os.getpid())
        metrics.remove_dead_files()
        if os.environ.get("DB_CONN_MAX_AGE", "0") in ("", "0"):
            # Each request's sync code runs on a thread of its own: without a pool every request
            # would connect to PostgreSQL anew (a backend forked per request, on shared cores).
            os.environ.setdefault("DB_POOL_MAX_SIZE", str(WEB_DB_POOL))
        os.execv(sys.executable, command)  # noqa: S606 (our own interpreter, no shell)
