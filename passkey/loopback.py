"""Localhost mode (§3.7, §16.3): every ceremony gets its own loopback-only web server on an
ephemeral port. It serves that ceremony's page and callback — the same Django views as HTTPS
mode, restricted to them — and is closed after delivery, rejection, cancel or expiry."""

import logging
import socket
import socketserver
import threading
import time
from urllib.parse import urlsplit
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.core.cache import cache
from django.core.handlers.wsgi import WSGIHandler
from django.db import connections
from django.templatetags.static import static
from django.urls import reverse

logger = logging.getLogger(__name__)

# WSGI environ keys the views read. A client cannot forge them: headers arrive as HTTP_*.
ORIGIN_KEY = "passkey.loopback_origin"
CEREMONY_KEY = "passkey.loopback_ceremony"
BIND = "127.0.0.1"  # loopback only, never another interface (§16.3)
POLL = 0.5  # seconds between the watcher's looks at the ceremony
CLOSE_GRACE = 0.5  # lets the response that decided the ceremony reach the browser first
CLOSED_TTL = 24 * 3600

# Pages started as their calls are held; past these, a page starts when an approver opens it
# (the host's link): a partner's flood of held tasks is not a flood of threads, ports and tabs.
EAGER = 20

_servers = {}
_lock = threading.Lock()


def running():
    """How many loopback pages this process serves."""
    with _lock:
        return len(_servers)


def _url_key(token):
    return f"passkey:loopback:{token}"


def _closed_key(token):
    return f"passkey:closed:{token}"


def live_url(token):
    """The page URL of the ceremony's running loopback server (in any process of this
    machine), or None. An advertisement its server could not take back — the process that
    served it was killed, or the host restarted, moments ago — is not live: nothing answers."""
    url = cache.get(_url_key(token))
    if url is None:
        return None
    try:
        socket.create_connection((BIND, urlsplit(url).port), timeout=1).close()
    except (OSError, ValueError, TypeError):
        cache.delete(_url_key(token))
        return None
    return url


def page_done(token):
    """The ceremony was decided (anywhere): its loopback server closes, here or in the process
    that runs it."""
    cache.set(_closed_key(token), 1, CLOSED_TTL)
    with _lock:
        server = _servers.get(token)
    if server is not None:
        server.close(delay=CLOSE_GRACE)


def serve(ceremony):
    """The ceremony's loopback server in this process, started on a fresh port if need be."""
    with _lock:
        server = _servers.get(ceremony.token)
        if server is None:
            server = _servers[ceremony.token] = LoopbackServer(ceremony)
            server.start()
    return server


def close_all():
    """Close every loopback server of this process (tests; process shutdown)."""
    with _lock:
        servers = list(_servers.values())
    for server in servers:
        server.close()
    for server in servers:
        server.join()


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            connections.close_all()  # this request's thread ends: so do its DB connections


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):
        pass  # request lines carry the ceremony token: they stay out of the logs


class LoopbackServer:
    def __init__(self, ceremony):
        self.token = ceremony.token
        self.expires = ceremony.expires_at.timestamp()
        self.httpd = make_server(
            BIND, 0, self._app, server_class=_ThreadingServer, handler_class=_QuietHandler
        )
        self.port = self.httpd.server_address[1]
        # WebAuthn wants the name "localhost" (the rpId), not 127.0.0.1.
        self.origin = f"http://localhost:{self.port}"
        self.url = self.origin + ceremony.get_absolute_url()
        self._paths = (
            ceremony.get_absolute_url(),
            reverse("passkey:login"),
            reverse("passkey:register"),  # a first-time approver registers right here (§7.2)
            static("passkey/"),
        )
        self._django = WSGIHandler()
        self._stop = threading.Event()
        self._close_at = None
        self._threads = []

    def start(self):
        for target, name in ((self._serve, "serve"), (self._watch, "watch")):
            thread = threading.Thread(
                target=target, name=f"passkey-{name}-{self.port}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        cache.set(_url_key(self.token), self.url, 5)
        logger.info("Approval page for ceremony %s… on port %s", self.token[:8], self.port)

    def close(self, delay=0.0):
        self._close_at = time.monotonic() + delay
        if not delay:
            self._stop.set()

    def join(self, timeout=5):
        for thread in self._threads:
            thread.join(timeout)

    @property
    def closed(self):
        return not any(thread.is_alive() for thread in self._threads)

    def _serve(self):
        try:
            self.httpd.serve_forever(poll_interval=POLL)
        finally:
            self.httpd.server_close()

    def _watch(self):
        """Closes the server on expiry or once the ceremony is decided; meanwhile advertises
        its URL to the host's other processes."""
        try:
            while not self._stop.wait(POLL / 5 if self._close_at else POLL):
                if self._close_at is not None and time.monotonic() >= self._close_at:
                    break
                if time.time() >= self.expires or cache.get(_closed_key(self.token)):
                    break
                cache.set(_url_key(self.token), self.url, 5)
        finally:
            if cache.get(_url_key(self.token)) == self.url:
                cache.delete(_url_key(self.token))
            self.httpd.shutdown()
            with _lock:
                if _servers.get(self.token) is self:
                    del _servers[self.token]
            logger.info("Approval page for ceremony %s… closed", self.token[:8])

    def _app(self, environ, start_response):
        # Only the page's own origin may talk to it: a rebinding DNS name is refused.
        if environ.get("HTTP_HOST") != f"localhost:{self.port}":
            return _plain(start_response, "421 Misdirected Request", "Open the page at localhost.")
        if not environ.get("PATH_INFO", "").startswith(self._paths):
            return _plain(start_response, "404 Not Found", "This page serves one approval only.")
        environ[ORIGIN_KEY], environ[CEREMONY_KEY] = self.origin, self.token
        return self._django(environ, start_response)


def _plain(start_response, status, text):
    start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
    return [text.encode()]
