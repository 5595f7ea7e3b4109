"""The approver's side in Chromium (tests/browser.py): the live server as the passkey origin."""

import pytest

from tests.passkey.conftest import (  # noqa: F401 (shared fixtures)
    approver,
    asking_server,
    strict_mailer,
)
from tests.toolindex.conftest import workspace  # noqa: F401 (shared fixture)


@pytest.fixture
def host(live_server, settings):
    """The live server as the passkey origin, HTTPS-mode style: WebAuthn wants the name
    localhost (not 127.0.0.1), with the port, and the rpId localhost."""
    base = f"http://localhost:{live_server.thread.port}"
    settings.PASSKEY_MODE = "https"
    settings.PASSKEY_ORIGIN = base
    settings.PASSKEY_RP_ID = "localhost"
    settings.PASSKEY_OPEN_BROWSER = False
    return base
