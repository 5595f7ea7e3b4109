"""A wallet's step-up page (pwma-over-mcp §3.4: a QR payload drawn as is): a QR code a phone's
camera reads, whatever the payload's length up to what the host accepts."""

import re

import pytest

from held.models import Ceremony
from mcplet_host.gateway.envelopes import url_step
from tests.passkey.conftest import url

pytestmark = pytest.mark.django_db


def step_up(held, *payloads):
    steps = [
        {"elicitationId": f"e{i}", "mode": "qr", "message": f"Scan {i}", "qrPayload": payload}
        for i, payload in enumerate(payloads)
    ]
    Ceremony.objects.filter(pk=held.pk).update(kind=Ceremony.Kind.STEP_UP, elicitations=steps)
    held.refresh_from_db()
    return held


def qr_width(page, index):
    figure = re.search(rf'<figure class="qr" id="qr-{index}">(.*?)</figure>', page, re.S)
    return int(re.search(r'<svg viewBox="0 0 (\d+) \d+"', figure.group(1)).group(1))


def test_a_short_payload_is_a_full_qr_code_not_a_micro_one(held, approver_client):
    page = approver_client.get(url(step_up(held, "12345", "happ:v1:good1"))).content.decode()
    # scale 4, border 2: a QR code is at least 21 modules wide (Micro QR: 11 to 17)
    assert qr_width(page, 0) >= (21 + 4) * 4 and qr_width(page, 1) >= (21 + 4) * 4


@pytest.mark.parametrize("payload", ["x" * 4000, "財布" * 900])
def test_a_payload_past_what_a_qr_code_holds_is_shown_to_copy(held, approver_client, payload):
    response = approver_client.get(url(step_up(held, payload)))
    assert response.status_code == 200
    page = response.content.decode()
    assert 'id="qr-0"' not in page
    assert "too long for a QR code" in page
    assert '<textarea id="qr-text-0" readonly' in page and payload in page
    assert 'id="cancel"' in page  # the person can still cancel it


@pytest.mark.parametrize(
    ("link", "site"),
    [
        ("https://pay.example/confirm", "pay.example"),
        ("https://pay.example:443/confirm", "pay.example"),
        ("http://127.0.0.1:9000/confirm", "127.0.0.1:9000"),
        ("https://[::1]:8443/confirm", "[::1]:8443"),
    ],
)
def test_a_url_steps_site_names_its_port_unless_the_schemes_own(link, site):
    step = url_step({"mode": "url", "message": "Confirm", "url": link, "elicitationId": "e"})
    assert step["domain"] == site


def test_a_wallet_on_another_port_of_the_servers_machine_is_elsewhere(held, approver_client):
    held.mcplet.server.url = "http://127.0.0.1:8000/mcp"
    held.mcplet.server.save()
    steps = [
        url_step({"mode": "url", "message": "Here", "url": f"{where}/x", "elicitationId": f"e{i}"})
        for i, where in enumerate(("http://127.0.0.1:8000", "http://127.0.0.1:9000"))
    ]
    Ceremony.objects.filter(pk=held.pk).update(kind=Ceremony.Kind.STEP_UP, elicitations=steps)
    page = approver_client.get(url(held)).content.decode()
    assert '<p class="domain" id="domain-1"><bdi>127.0.0.1:9000</bdi></p>' in page
    assert 'id="elsewhere-0"' not in page
    assert "not the server’s domain (<bdi>127.0.0.1:8000</bdi>)" in page
