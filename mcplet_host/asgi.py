import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcplet_host.settings")
django_asgi_app = get_asgi_application()

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
