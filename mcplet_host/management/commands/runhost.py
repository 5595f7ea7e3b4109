import socket
import threading

from celery.beat import EmbeddedService
from celery.worker import WorkController
from daphne.endpoints import build_endpoint_description_strings
from daphne.server import Server
from django.conf import settings
from django.core.management.base import BaseCommand

from mcplet_host.asgi import application
from mcplet_host.celery import app
from pools import watcher


class Command(BaseCommand):
    help = (
        "Run the whole host in one process: daphne serving the web app, a Celery worker and "
        "beat and the MCP watcher (threads). With REDIS_URL unset this is the embedded default "
        "(in-memory broker)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--host", default="localhost", help="Interface to bind (default localhost)."
        )
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--concurrency", type=int, default=4, help="Worker threads (default 4)."
        )

    def handle(self, *args, host, port, concurrency, **options):
        worker = WorkController(
            app=app,
            hostname=f"runhost@{socket.gethostname()}",
            pool_cls="threads",
            concurrency=concurrency,
            # The in-memory broker has no other workers to sync or gossip with.
            without_mingle=settings.EMBEDDED,
            without_gossip=settings.EMBEDDED,
            without_heartbeat=settings.EMBEDDED,
        )
        beat = EmbeddedService(app, thread=True, scheduler_cls=settings.CELERY_BEAT_SCHEDULER)
        mode = "embedded (in-memory broker)" if settings.EMBEDDED else "Redis"
        self.stdout.write(f"MCPlet Host on http://{host}:{port}/ — worker, beat, watcher, {mode}")
        self.stdout.write(
            f"  admin: http://{host}:{port}/admin/   health: http://{host}:{port}/healthz"
        )
        worker_thread = threading.Thread(target=worker.start, name="celery-worker", daemon=True)
        worker_thread.start()
        beat.start()
        stop_watcher = watcher.start_in_thread()
        try:
            Server(
                application=application,
                endpoints=build_endpoint_description_strings(host=host, port=port),
                signal_handlers=True,
            ).run()
        finally:
            stop_watcher()
            beat.stop()
            worker.stop(in_sighandler=False)
