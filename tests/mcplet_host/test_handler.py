"""The web's ASGI handler (mcplet_host.handler): a request's whole middleware chain and its view
run in one hop to a thread, not a hop for each middleware's hooks as in Django's own handler,
and the chain still does all it did. Its threads are kept for the next requests."""

import json
import threading

import pytest
from asgiref import sync
from asgiref.testing import ApplicationCommunicator
from django.core.signals import request_finished, request_started

from mcplet_host.asgi import application, django_asgi_app
from mcplet_host.handler import RequestThread
from mcplet_host.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)


def get(path):
    """(status, headers, body) of a GET through the host's ASGI application."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"localhost:8000")],
        "client": ("127.0.0.1", 5000),
        "server": ("localhost", 8000),
    }

    async def exchange():
        app = ApplicationCommunicator(application, scope)
        await app.send_input({"type": "http.request", "body": b""})
        start = await app.receive_output(10)
        body = b""
        while True:
            message = await app.receive_output(10)
            body += message.get("body", b"")
            if not message.get("more_body"):
                await app.wait(10)  # the handler's end: the response closed, request_finished
                return start["status"], dict(start["headers"]), body

    return sync.async_to_sync(exchange)()


@pytest.fixture
def hops(monkeypatch):
    """How many times sync code is called from the loop (SyncToAsync)."""
    counted = []
    real = sync.SyncToAsync.__call__

    def counting(self, *args, **kwargs):
        counted.append(getattr(self.func, "__qualname__", repr(self.func)))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(sync.SyncToAsync, "__call__", counting)
    return counted


def test_a_request_makes_one_hop_for_its_middleware_and_view(hops):
    get("/a2a/agents")  # warm: the first request imports the views
    hops.clear()

    status, headers, body = get("/a2a/agents")

    assert status == 401  # the partner API refused it: the view ran
    assert json.loads(body)["error"]["code"] == "AUTH_REQUIRED"
    # request_started's receivers, the chain with its view, and the response's close: one hop.
    assert hops == ["ASGIHandler._response"]


@pytest.fixture
def signals_sent():
    """Each request_started and request_finished, in order, with the thread it was sent on."""
    sent = []

    def started(**kwargs):
        sent.append(("started", threading.current_thread().name))

    def finished(**kwargs):
        sent.append(("finished", threading.current_thread().name))

    request_started.connect(started)
    request_finished.connect(finished)
    yield sent
    request_started.disconnect(started)
    request_finished.disconnect(finished)


def test_a_response_sent_whole_is_closed_on_the_request_thread(signals_sent):
    assert get("/a2a/agents")[0] == 401
    assert [signal for signal, _ in signals_sent] == ["started", "finished"]
    assert all(thread.startswith("request") for _, thread in signals_sent)


def test_a_streamed_response_is_closed_once_sent(signals_sent, hops):
    get("/static/passkey/favicon.svg")  # warm
    signals_sent.clear()
    hops.clear()
    status, headers, body = get("/static/passkey/favicon.svg")
    assert status == 200 and body.startswith(b"<svg")  # WhiteNoise's file, streamed
    assert [signal for signal, _ in signals_sent] == ["started", "finished"]
    # Made on the request's thread, its content read (Django maps a file's iterator), then closed.
    assert hops[0] == "ASGIHandler._response" and hops[-1] == "HttpResponseBase.close", hops


def test_the_middleware_still_runs_around_the_view():
    status, headers, _ = get("/a2a/agents")

    assert status == 401
    assert headers[b"X-Frame-Options"] == b"DENY"  # XFrameOptionsMiddleware, the innermost
    assert headers[b"X-Content-Type-Options"] == b"nosniff"  # SecurityMiddleware, the outermost
    event = AuditEvent.objects.filter(event_type="a2a.partner.request").latest("seq")
    assert event.details["status"] == 401 and event.details["path"] == "/a2a/agents"


def test_requests_in_turn_share_a_kept_thread():
    threads = []

    def finished(**kwargs):
        threads.append(threading.current_thread())

    request_finished.connect(finished)
    try:
        for _ in range(3):
            assert get("/a2a/agents")[0] == 401
    finally:
        request_finished.disconnect(finished)
    assert len(set(threads)) == 1 and threads[0].name.startswith("request")
    assert threads[0].is_alive()  # kept, idle, for the next request


def test_a_thread_still_busy_serves_no_other_request():
    """A request cut short (its client gone) may leave its sync code running on its thread."""
    thread, release = RequestThread(), threading.Event()
    running = thread.submit(release.wait, 5)
    django_asgi_app._give_back(thread)
    assert thread not in django_asgi_app._idle
    release.set()
    assert running.result(5) is True
    idle = RequestThread()
    django_asgi_app._give_back(idle)
    assert django_asgi_app._idle[-1] is idle


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/a2a/\x00agents", 400),  # a NUL in the path: refused by the host's middleware
        ("/a2a/agents%00", 401),
        ("/a2a/agents/%ED%A0%80", 401),  # a lone surrogate, percent-encoded
        ("/a2a/agents/\\evil", 401),
        ("/a2a/tasks/1e400", 401),
        ("/passkey/ceremonies/%00/", 302),  # to the sign-in page
        ("/" + "a/" * 2000, 404),
    ],
)
def test_a_hostile_path_is_answered_not_a_server_error(path, status):
    assert get(path)[0] == status
