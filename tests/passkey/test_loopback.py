"""Localhost mode (§3.7, §16.3): a loopback-only server per ceremony, on a fresh port, serving
that ceremony alone, closed after the decision or at expiry."""

import http.client
import socket
import time
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from held.models import Ceremony
from mcplet_host.models import AuditEvent
from passkey import loopback
from tests.passkey.authenticator import SoftAuthenticator
from tests.passkey.conftest import hold_email, register, url

pytestmark = pytest.mark.django_db


def get(server, path, host=None):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.request("GET", path, headers={"Host": host or f"localhost:{server.port}"})
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, response.getheader("Location"), body


def wait_closed(server, seconds=5):
    deadline = time.monotonic() + seconds
    while not server.closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.closed
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()


@pytest.fixture
def localhost_mode(settings):
    settings.PASSKEY_MODE = "localhost"
    settings.PASSKEY_ORIGIN, settings.PASSKEY_RP_ID = "http://localhost:8000", "localhost"


def test_a_loopback_only_server_on_a_fresh_port_per_ceremony(held, registry):
    first = loopback.serve(held)
    second = loopback.serve(hold_email(registry, {"to": ["a@b.c"], "body": "x"}))
    assert first.httpd.server_address[0] == "127.0.0.1"
    assert first.port != second.port and 8000 not in (first.port, second.port)
    assert loopback.serve(held) is first  # one per ceremony
    assert first.url == f"http://localhost:{first.port}{url(held)}"
    assert loopback.live_url(held.token) == first.url


def test_it_serves_its_own_ceremony_only(held, registry):
    server = loopback.serve(held)
    other = hold_email(registry, {"to": ["a@b.c"], "body": "x"})
    for path in ("/admin/", "/auth/verify-assertion", "/healthz", url(other), "/passkey/"):
        status, _, body = get(server, path)
        assert status == 404, path
    status, location, _ = get(server, url(held))
    assert status == 302 and location.startswith("/passkey/login/?next=")  # on its own origin
    assert get(server, "/passkey/login/")[0] == 200
    assert get(server, "/static/passkey/ceremony.js")[0] == 200


def test_its_page_links_to_the_hosts_own_pages(held, approver, localhost_mode):
    from django.test import Client

    approver.is_staff = True
    approver.save()
    server, client = loopback.serve(held), Client()
    client.force_login(approver)
    response = client.get(
        url(held),
        HTTP_HOST=f"localhost:{server.port}",
        **{loopback.ORIGIN_KEY: server.origin, loopback.CEREMONY_KEY: held.token},
    )
    page = response.content.decode()
    assert 'id="approve"' in page  # the loopback page itself
    host = "http://localhost:8000"  # PASSKEY_ORIGIN: registration and the dashboard live there
    assert f'href="{host}/passkey/register/?next={url(held)}"' in page
    assert f'id="to-dashboard" href="{host}/dashboard/"' in page
    assert f"localhost:{server.port}/passkey/register" not in page


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "evil.example:{port}", "localhost"])
def test_other_host_names_are_refused(held, host):
    server = loopback.serve(held)
    status, _, _ = get(server, url(held), host=host.format(port=server.port))
    assert status == 421  # a rebinding DNS name cannot reach the page


def test_it_closes_once_the_ceremony_is_decided(held, approver, localhost_mode):
    """(Only localhost mode serves loopback pages: the https mode's decisions tell none.)"""
    server = loopback.serve(held)
    held.decline(Ceremony.Status.REJECTED, approver)
    wait_closed(server)
    assert loopback.live_url(held.token) is None


def test_it_closes_when_another_process_decides(held):
    server = loopback.serve(held)
    cache.set(loopback._closed_key(held.token), 1)  # what page_done() says to every process
    wait_closed(server)


def test_it_closes_at_expiry(registry):
    ceremony = hold_email(registry)
    Ceremony.objects.filter(pk=ceremony.pk).update(expires_at=timezone.now() + timedelta(seconds=1))
    ceremony.refresh_from_db()
    server = loopback.serve(ceremony)
    assert not server.closed
    wait_closed(server)


def leads_to(response, target):
    """The host's page that takes the approver to the loopback page: its link, followed by its
    own script (a redirect would be stopped by the CSP's form-action after a form)."""
    page = response.content.decode()
    assert response.status_code == 200 and "Location" not in response
    assert f'id="go" class="button approve" href="{target}"' in page
    assert '<script src="/static/passkey/open.js" defer></script>' in page
    assert "form-action 'self'" in response["Content-Security-Policy"]


def test_the_hosts_page_opens_a_new_loopback_page(approver_client, held, localhost_mode):
    assert loopback.live_url(held.token) is None  # e.g. the host started again
    response = approver_client.post(url(held, "open"))
    server = loopback.serve(held)
    leads_to(response, server.url)
    leads_to(approver_client.get(url(held)), server.url)
    leads_to(approver_client.post(url(held, "open")), server.url)  # the same page, once
    assert loopback.serve(held) is server


def test_opening_a_decided_or_unknown_call_starts_nothing(
    approver_client, held, approver, localhost_mode
):
    response = approver_client.post(url(held, "open").replace(held.token, "no-such-token"))
    assert response.status_code == 404 and response.json()["reason"] == "unknown_ceremony"
    refused = AuditEvent.objects.get(event_type="mcplet.passkey.refused")
    assert refused.details["stage"] == "open" and refused.actor_id == approver.username

    held.decline(Ceremony.Status.REJECTED, approver)
    response = approver_client.post(url(held, "open"))
    assert response.status_code == 302 and response["Location"] == url(held)
    assert loopback.live_url(held.token) is None and not loopback._servers


def test_only_approvers_open_a_loopback_page(client, held, localhost_mode, django_user_model):
    assert client.post(url(held, "open")).status_code == 401  # not signed in
    client.force_login(django_user_model.objects.create_user("guest", "g@example.org", "pw"))
    assert client.post(url(held, "open")).status_code == 403
    assert AuditEvent.objects.filter(event_type="mcplet.passkey.refused").count() == 2
    assert not loopback._servers


def test_the_callback_takes_the_loopback_origin_only(
    approver_client, held, localhost_mode, settings
):
    """The same views behind the loopback server: the assertion must come from that port."""
    key = SoftAuthenticator()
    register(approver_client, key, "local", origin=settings.PASSKEY_ORIGIN)
    origin = "http://localhost:50123"
    environ = {loopback.ORIGIN_KEY: origin, loopback.CEREMONY_KEY: held.token}
    options = approver_client.post(url(held, "challenge"), **environ).json()
    elsewhere = key.get(options, "http://localhost:50124")
    response = approver_client.post(
        url(held, "assertion"), elsewhere, "application/json", HTTP_ORIGIN=origin, **environ
    )
    assert response.status_code == 403 and response.json()["reason"] == "wrong_origin"

    options = approver_client.post(url(held, "challenge"), **environ).json()
    response = approver_client.post(
        url(held, "assertion"),
        key.get(options, origin),
        "application/json",
        HTTP_ORIGIN=origin,
        **environ,
    )
    assert response.status_code == 200
    held.refresh_from_db()
    assert held.status == Ceremony.Status.APPROVED


def test_a_page_whose_process_died_is_not_led_to(approver_client, held, localhost_mode):
    """The host was killed (or restarted) before its page could withdraw its address: nothing
    answers there, so the host's page offers to open a new one rather than lead nowhere."""
    with socket.socket() as gone:
        gone.bind(("127.0.0.1", 0))
        dead = f"http://localhost:{gone.getsockname()[1]}{url(held)}"
    cache.set(loopback._url_key(held.token), dead, 5)
    assert loopback.live_url(held.token) is None
    assert cache.get(loopback._url_key(held.token)) is None  # forgotten
    page = approver_client.get(url(held)).content.decode()
    assert 'id="open"' in page and dead not in page
    leads_to(approver_client.post(url(held, "open")), loopback.serve(held).url)
