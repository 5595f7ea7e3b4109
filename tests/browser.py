"""Browser tests in Debian's Chromium, driven by Playwright's sync API, with a CDP virtual
authenticator (DESIGN.md, "Facts already checked"). A plugin of the root conftest: one browser
per module, and for each test a fresh context and page at a laptop's size."""

import asyncio
import importlib.util
import os
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

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
LAPTOP = {"width": 1440, "height": 900}
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
    runs a loop of its own (discovery's anyio.run, async_to_sync) must not see it."""
    loop = asyncio.events._get_running_loop()
    asyncio.events._set_running_loop(None)
    try:
        yield
    finally:
        asyncio.events._set_running_loop(loop)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    if fixturedef.argname in ("browser", "page") or "browser" not in request.fixturenames:
        return (yield)
    with outside_the_browser_loop():
        return (yield)


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists() or importlib.util.find_spec("playwright") is None:
        reason = "needs /usr/bin/chromium (apt-get install chromium) and the playwright package"
        if os.environ.get("CI"):  # CI runs every test: a missing browser fails the run
            pytest.fail(f"CI runs the browser tests: {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # the ORM, in Playwright's thread
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
            )
            yield chromium
            chromium.close()


class Authenticator:
    """The page's virtual authenticator: what it holds, and a way to forget it."""

    def __init__(self, cdp, authenticator_id):
        self.cdp, self.id = cdp, authenticator_id

    def credentials(self):
        return self.cdp.send("WebAuthn.getCredentials", {"authenticatorId": self.id})["credentials"]

    def clear(self):
        self.cdp.send("WebAuthn.clearCredentials", {"authenticatorId": self.id})

    def hold(self, credentials):
        """Hold exactly these passkeys, their sign counts as they are."""
        self.clear()
        for credential in credentials:
            self.cdp.send(
                "WebAuthn.addCredential", {"authenticatorId": self.id, "credential": credential}
            )


def new_page(context):
    """A page with a virtual authenticator, its console, and its problems: script errors, CSP
    violations, failed requests (but the websocket: the WSGI live server has none)."""
    page = context.new_page()
    watch(page)
    add_authenticator(page)
    return page


def add_authenticator(page, like=None):
    """A virtual authenticator for `page` (each tab has its own), holding the passkeys of the
    page `like`, if given: a tab the person opened from that one."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    added = cdp.send("WebAuthn.addVirtualAuthenticator", {"options": AUTHENTICATOR})
    page.authenticator = Authenticator(cdp, added["authenticatorId"])
    if like is not None:
        page.authenticator.hold(like.authenticator.credentials())
    return page


def watch(page):
    """Keep `page`'s console and its problems (once per page)."""
    if hasattr(page, "problems"):
        return page
    page.console_messages, page.problems = [], []
    page.on("console", lambda message: page.console_messages.append(message.text))
    page.on("pageerror", lambda error: page.problems.append(str(error)))
    page.on(
        "console",
        lambda m: (
            page.problems.append(m.text)
            if m.type == "error" and not m.text.startswith(("WebSocket", "Failed to load resource"))
            else None
        ),
    )
    page.on(
        "response",
        lambda r: (
            page.problems.append(f"{r.status} {r.url}")
            if r.status >= 400 and not r.url.endswith("/ws/dashboard/")
            else None
        ),
    )
    return page


def open_tab(page, click):
    """`click()` opens a new tab (a link with target=_blank): that tab, watched from its first
    response, with a virtual authenticator holding `page`'s passkeys."""
    with page.expect_popup() as opened:
        click()
    return add_authenticator(opened.value, like=page)


def close_tab(tab, back_to, signed=1):
    """Close a tab `open_tab` gave, if it did not close itself, its passkeys back in `back_to`'s
    authenticator with their sign counts advanced (by the `signed` assertions made in it, if the
    tab is gone): one person's one passkey."""
    try:
        credentials = tab.authenticator.credentials()
    except Exception:  # the tab closed itself, and its authenticator with it
        credentials = back_to.authenticator.credentials()
        for credential in credentials:
            credential["signCount"] += signed
    back_to.authenticator.hold(credentials)
    if not tab.is_closed():
        tab.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport=LAPTOP)
    context.set_default_timeout(20_000)
    context.on("page", watch)  # tabs the pages open too
    yield new_page(context)
    context.close()


def use_session(page, base, user):
    """Sign `user` in by cookie (the admin login form takes staff only)."""
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": base}])


def screenshot(page, name):
    """With MCPLET_SCREENSHOTS=<dir> (e.g. docs/screenshots), keep a picture of the page."""
    folder = os.environ.get("MCPLET_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)
