"""Browser tests in Debian's Chromium with a CDP virtual authenticator (DESIGN.md, "Facts already
checked"). One browser per module; each test gets a fresh context, page and authenticator."""

import asyncio
import os
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.passkey.conftest import approver, strict_mailer  # noqa: F401 (shared fixtures)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
AUTHENTICATOR = {
    "protocol": "ctap2",
    "transport": "internal",
    "hasResidentKey": True,
    "hasUserVerification": True,
    "isUserVerified": True,
    "automaticPresenceSimulation": True,
}


@contextmanager
def outside_the_browser_loop():
    """Playwright's sync API leaves its event loop marked as running in this thread; code that
    runs a loop of its own (discovery's anyio.run) must not see it."""
    loop = asyncio.events._get_running_loop()
    asyncio.events._set_running_loop(None)
    try:
        yield
    finally:
        asyncio.events._set_running_loop(loop)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    if fixturedef.argname in ("browser", "page"):
        return (yield)
    with outside_the_browser_loop():
        return (yield)


def _unavailable(reason):
    # CI runs every test: a missing browser there is a failure, not a skip.
    if os.environ.get("CI"):
        pytest.fail(f"CI needs the browser tests: {reason} (apt-get install -y chromium)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} is missing")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed")
    # Playwright's sync API runs an event loop in this thread; Django's ORM must still be
    # allowed here (only for these tests).
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
            )
            yield chromium
            chromium.close()


class Authenticator:
    def __init__(self, cdp, authenticator_id):
        self.cdp, self.id = cdp, authenticator_id

    def credentials(self):
        return self.cdp.send("WebAuthn.getCredentials", {"authenticatorId": self.id})["credentials"]

    def clear(self):
        self.cdp.send("WebAuthn.clearCredentials", {"authenticatorId": self.id})


@pytest.fixture
def page(browser):
    context = browser.new_context()
    context.set_default_timeout(20_000)
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    added = cdp.send("WebAuthn.addVirtualAuthenticator", {"options": AUTHENTICATOR})
    page.authenticator = Authenticator(cdp, added["authenticatorId"])
    page.console_messages = []
    page.on("console", lambda message: page.console_messages.append(message.text))
    yield page
    context.close()


@pytest.fixture
def host(live_server, settings):
    """The live server as the passkey origin, HTTPS-mode style: WebAuthn wants the name
    localhost (not 127.0.0.1), with the port, and the rpId localhost."""
    base = f"http://localhost:{live_server.thread.port}"
    settings.ROOT_URLCONF = "tests.passkey.urls"
    settings.PASSKEY_MODE = "https"
    settings.PASSKEY_ORIGIN = base
    settings.PASSKEY_RP_ID = "localhost"
    settings.PASSKEY_OPEN_BROWSER = False
    return base
