"""After registering a passkey, `next=` leads the approver back to the approval — on this host
only, never to another site (issue 23). What a browser would follow is read from the page as
served: the form's data-next (register.js goes there once the passkey is saved, or reloads the
page when it is empty) and the "Back to the approval" link, each resolved as a browser resolves
it (ada_url: the WHATWG URL parser browsers implement)."""

import re
from html.parser import HTMLParser
from pathlib import Path

import ada_url
import pytest
from django.conf import settings as django_settings
from django.test import Client

from passkey import loopback
from tests.passkey.conftest import ORIGIN, RP_ID, url

pytestmark = pytest.mark.django_db

PAGE = f"{ORIGIN}/passkey/register/"
BACK = "Back to the approval"
SCRIPT = Path(django_settings.BASE_DIR) / "static" / "passkey" / "register.js"

# Each would take the approver elsewhere (or run script) if rendered: the page carries none.
HOSTILE = [
    "https://evil.example/",
    "//evil.example",
    "/\\evil.example",
    "\\\\evil.example",
    "\\/evil.example",
    "/\\/evil.example",
    "///evil.example",
    "http:evil.example",
    "https:/evil.example",
    "javascript:alert(1)",
    "JavaScript:alert(document.domain)",
    "data:text/html,<script>alert(1)</script>",
    " //evil.example",  # browsers strip leading spaces and controls
    "\t//evil.example",
    "/\t/evil.example",  # and tabs and newlines anywhere
    "/\n/evil.example",
    f"https://{RP_ID}@evil.example/",
    f"https://evil.example\\@{RP_ID}/",
    f"https://{RP_ID}.evil.example/",
    f"https://{RP_ID}:8443/passkey/",  # another port is another origin
    f"http://{RP_ID}/passkey/",  # a downgrade from the HTTPS page
]
# Odd, but harmless where a browser goes: may be rendered, and stays on this host.
ODD = [
    "/%2F/evil.example",
    "%2F%2Fevil.example",
    "passkey/ceremonies/",
    "/\u2215evil.example",
]


# Refused before any view (mcplet_host.middleware): no page, so no target.
WITH_NUL = ["\x00//evil.example", "\x00javascript:alert(1)", "/\x00/evil.example", "/passkey/\x00"]


class Targets(HTMLParser):
    """The register form's data-next and the hrefs of the "Back to the approval" links."""

    def __init__(self, html):
        super().__init__()
        self.data_next, self.back, self._href = None, [], None
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form" and attrs.get("id") == "register":
            self.data_next = attrs.get("data-next")
        if tag == "a":
            self._href = attrs.get("href")

    def handle_data(self, data):
        if self._href is not None and data.strip() == BACK:
            self.back.append(self._href)

    def handle_endtag(self, tag):
        if tag == "a":
            self._href = None


@pytest.fixture(autouse=True)
def _host_name(settings):
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, RP_ID]


def register_page(client, value):
    """GET the register page with `next` as the host serves it, over HTTPS."""
    return client.get("/passkey/register/", {"next": value}, secure=True, HTTP_HOST=RP_ID)


@pytest.fixture
def served(approver_client):
    """The register page with `next`: (its data-next, its "Back to the approval" links)."""

    def get(value):
        response = register_page(approver_client, value)
        assert response.status_code == 200
        targets = Targets(response.content.decode())
        assert targets.data_next is not None  # the form is there
        return targets.data_next, targets.back

    return get


def followed(value, page=PAGE):
    """Where a browser goes from `page` for an attribute value `value` ("" leads nowhere:
    register.js reloads the page itself), or None if it goes nowhere (not a URL)."""
    try:
        return ada_url.URL(value or ada_url.URL(page).pathname, page)
    except ValueError:
        return None


def assert_stays_here(data_next, back, origin=ORIGIN):
    for value in (data_next, *back):
        target = followed(value, f"{origin}/passkey/register/")
        assert target is None or target.origin == origin, (value, target and target.href)


def test_register_js_goes_only_where_data_next_says():
    """What `followed` models: the script's one navigation is data-next, or its own page."""
    script = SCRIPT.read_text()
    assert "const next = form.dataset.next;" in script
    navigations = re.findall(r"location\.(?:assign|replace|href)\b[^;]*|window\.open\b", script)
    assert navigations == ["location.assign(next || window.location.pathname)"]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_next_is_not_on_the_page(served, value):
    data_next, back = served(value)

    assert data_next == "" and back == []  # register.js then reloads this page
    assert_stays_here(data_next, back)


@pytest.mark.parametrize("value", ODD)
def test_an_odd_next_still_stays_on_this_host(served, value):
    assert_stays_here(*served(value))


@pytest.mark.parametrize("value", WITH_NUL)
def test_a_next_holding_a_nul_gets_no_page(approver_client, value):
    response = register_page(approver_client, value)
    assert response.status_code == 400 and "evil" not in response.content.decode()
    assert "Location" not in response


def test_back_to_the_approval_on_this_host(served, held):
    path = url(held)
    for value in (path, f"{path}?from=mail", f"{ORIGIN}{path}"):
        data_next, back = served(value)

        assert data_next == value and back == [value]
        assert followed(data_next).href == ORIGIN + value.removeprefix(ORIGIN)
        assert_stays_here(data_next, back)


def test_from_a_loopback_page_registration_leads_back_to_the_live_approval(
    settings, held, approver
):
    """Localhost mode: the ceremony's loopback page links to registration on the host's own
    origin, which leads back to the ceremony on the host, which goes on to the loopback page."""
    settings.PASSKEY_MODE = "localhost"
    settings.PASSKEY_ORIGIN, settings.PASSKEY_RP_ID = "http://localhost:8000", "localhost"
    host = settings.PASSKEY_ORIGIN
    server, client = loopback.serve(held), Client()
    client.force_login(approver)
    on_loopback = client.get(
        url(held),
        HTTP_HOST=f"localhost:{server.port}",
        **{loopback.ORIGIN_KEY: server.origin, loopback.CEREMONY_KEY: held.token},
    ).content.decode()
    link = re.search(r'href="([^"]*/passkey/register/\?next=[^"]*)"', on_loopback).group(1)
    register = followed(link.replace("&amp;", "&"), server.url)
    assert register.origin == host  # registration lives on the host, not the loopback port

    page = client.get(f"{register.pathname}{register.search}", HTTP_HOST="localhost:8000")
    targets = Targets(page.content.decode())

    assert targets.data_next == url(held) and targets.back == [url(held)]
    assert_stays_here(targets.data_next, targets.back, origin=host)
    back = followed(targets.data_next, register.href)
    assert back.href == f"{host}{url(held)}"
    response = client.get(back.pathname, HTTP_HOST="localhost:8000")
    # A page whose link (and its script) leads on: a redirect would be stopped by the CSP.
    assert response.status_code == 200
    assert f'id="go" class="button approve" href="{server.url}"' in response.content.decode()
