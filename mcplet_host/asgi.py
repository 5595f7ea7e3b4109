import os
import signal
import threading
import time

import django

from mcplet_host import startup, tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcplet_host.settings")
startup.begin()
# Each web process (and runhost) traces, if asked, before Django loads its middleware.
tracing.setup()
django.setup(set_prefix=False)  # as django.core.asgi.get_asgi_application does

from mcplet_host.handler import ASGIHandler  # noqa: E402

django_asgi_app = ASGIHandler()

# Imported once Django is set up (they load models).
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

import dashboard.routing  # noqa: E402
from mcplet_host.middleware import SameOriginWebsocketValidator  # noqa: E402
from passkey import links  # noqa: E402

# The web process (and runhost) serves the host's pages: the loopback pages of localhost mode
# too, whichever process held their calls (passkey.links).
links.serve_pages_here()

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # The page's own origin (port included): another site cannot ride the session cookie.
        "websocket": SameOriginWebsocketValidator(
            AuthMiddlewareStack(URLRouter(dashboard.routing.websocket_urlpatterns))
        ),
    }
)


def _end_with_the_supervisor():
    """A worker process of `manage.py serve` (whose uvicorn supervisor names itself in
    MCPLET_WEB_SUPERVISOR) stops when the supervisor is gone, even killed with no time to stop
    its workers: an orphan would go on serving on the port, and the supervisor started again
    could not bind it."""
    supervisor = os.environ.get("MCPLET_WEB_SUPERVISOR", "")
    if not supervisor.isdigit() or os.getppid() != int(supervisor):
        return  # not a worker of `serve` (daphne, runhost, or uvicorn's single process)

    def watch():
        while os.getppid() == int(supervisor):
            time.sleep(1)
        os.kill(os.getpid(), signal.SIGTERM)  # uvicorn's graceful stop

    threading.Thread(target=watch, name="supervisor-watch", daemon=True).start()


_end_with_the_supervisor()
