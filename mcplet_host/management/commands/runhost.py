import os
import socket
import threading
from urllib.parse import urlsplit

from celery.beat import EmbeddedService
from celery.worker import WorkController
from daphne.endpoints import build_endpoint_description_strings
from daphne.server import Server
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from agents.models import Agent
from mcplet_host.asgi import application
from mcplet_host.celery import app
from mcplets.restaurant import backend as restaurant_backend
from passkey import links
from pools import watcher

WALKTHROUGH_DIRECTOR = "director"  # seed_reference's


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
        parser.add_argument(
            "--port",
            type=int,
            default=settings.MCPLET_PORT,
            help="Port to serve (default MCPLET_PORT, 8000); also the passkey origin's port.",
        )
        parser.add_argument(
            "--concurrency", type=int, default=4, help="Worker threads (default 4)."
        )
        parser.add_argument(
            "--restaurant-port",
            type=int,
            default=restaurant_backend.default_port(),
            help="Port of the reference scenario's backing service (default: the port of "
            "RESTAURANT_API_URL, 5100 if unset; 0: do not start it).",
        )

    def handle(self, *args, host, port, concurrency, restaurant_port, **options):
        self._check_origin(port)
        # Before the worker starts: the calls it holds get their loopback pages here, and every
        # process of this installation links to this host (and hands it its calls).
        links.publish(settings.PASSKEY_ORIGIN, self._address(host, port))
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
        stopping, worker_ended = threading.Event(), threading.Event()
        threading.Thread(
            target=self._run_worker,
            args=(worker, stopping, worker_ended),
            name="celery-worker",
            daemon=True,
        ).start()
        beat.start()
        stop_watcher = watcher.start_in_thread()
        restaurant = self._start_restaurant(restaurant_port)
        if restaurant is not None:
            self._print_walkthrough(settings.PASSKEY_ORIGIN.rstrip("/"))
        try:
            Server(
                application=application,
                endpoints=build_endpoint_description_strings(host=host, port=port),
                signal_handlers=True,
            ).run()
        finally:
            stopping.set()
            if restaurant is not None:
                restaurant.shutdown()
                restaurant.server_close()
            stop_watcher()
            beat.stop()
            worker.stop(in_sighandler=False)
        if worker_ended.is_set():
            raise CommandError(
                f"the Celery worker stopped (exit code {worker.exitcode}): the host stops with "
                "it, so that its supervisor starts it again",
                returncode=worker.exitcode or 1,
            )

    @staticmethod
    def _run_worker(worker, stopping, ended):
        """A worker that ends by itself (an unrecoverable broker error: Redis back empty while
        it held a task) stops the web too: a host without its worker would go on taking
        approvals it never runs, where a stopped one is started again by its supervisor."""
        from twisted.internet import reactor  # daphne's, installed when daphne.server loaded

        worker.start()
        if not stopping.is_set():
            ended.set()
            reactor.callFromThread(reactor.stop)

    @staticmethod
    def _address(host, port):
        """Where a process on this machine reaches this host."""
        if host in ("", "0.0.0.0", "::", "[::]"):  # noqa: S104 (read, not bound)
            host = "localhost"
        elif ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{port}"

    def _check_origin(self, port):
        """In localhost mode approvers register their passkeys on this host's own pages, so the
        passkey origin must be the address it serves. (In https mode a proxy may stand between:
        the origin is the public address, whatever port runhost listens on.)"""
        if settings.PASSKEY_MODE != "localhost":
            return
        served = f"http://localhost:{port}"
        origin = urlsplit(settings.PASSKEY_ORIGIN)
        if (origin.scheme, origin.hostname, origin.port or 80) != ("http", "localhost", port):
            raise CommandError(
                f"PASSKEY_ORIGIN is {settings.PASSKEY_ORIGIN}, but this host serves {served}: "
                f"passkeys registered here would not work. Set PASSKEY_ORIGIN to {served}, or "
                "unset it (in the environment and .env) to follow the port (manage.py runhost "
                "--port, or MCPLET_PORT)."
            )

    def _start_restaurant(self, port):
        """The reference scenario's CRM/ERP/weather/e-mail service, so the demo runs offline."""
        if not port:
            return None
        os.environ.setdefault("RESTAURANT_OUTBOX", str(settings.VAR_DIR / "outbox"))
        try:
            server, url = restaurant_backend.serve_in_thread("127.0.0.1", port)
        except OSError as exc:
            self.stdout.write(
                f"  restaurant backing service not started on port {port}: {exc}. Another host "
                "on this machine may hold it: give this one its own, RESTAURANT_API_URL="
                "http://127.0.0.1:<port> (seed_reference reads it too)."
            )
            return None
        self.stdout.write(f"  restaurant backing service: {url}")
        return server

    def _print_walkthrough(self, base):
        """The reference scenario in six steps, when `seed_reference` has run (README)."""
        if not Agent.objects.filter(agent_id=WALKTHROUGH_DIRECTOR).exists():
            return
        outbox = os.environ["RESTAURANT_OUTBOX"]
        self.stdout.write(
            self.style.MIGRATE_HEADING("\nTry the reference scenario (README, Walkthrough):")
        )
        for step in (
            f"Open {base}/dashboard/ and sign in (make run printed the admin password once).",
            f"Register a passkey: {base}/passkey/register/",
            f'Control: press "Run Director now" for {WALKTHROUGH_DIRECTOR}.',
            "Approvals: open the plan's approval page, Approve with passkey.",
            "Approvals: open send_email's approval page, Approve with passkey.",
            f"Read the e-mails to the guests at risk of cancelling: {outbox}/*.eml",
        ):
            self.stdout.write(f"  {step}")
