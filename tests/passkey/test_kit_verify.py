"""The kit's `verify_assertion` against the host's real endpoint (a live server), and a strict
MCPlet written with it that runs only what the host verified."""

import socket
from types import SimpleNamespace

import anyio
import pytest

from held.models import Ceremony
from mcplet_host import gateway
from mcplets import averify_assertion, verify_assertion
from passkey.models import BackendToken
from tests.passkey.conftest import EMAIL_ARGS, configure, post_assertion, sign

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def endpoint(live_server):
    return f"{live_server.url}/auth/verify-assertion"


def code(envelope):
    return envelope["error"]["code"]


def test_no_assertion_is_auth_required():
    ctx = SimpleNamespace(request_context=SimpleNamespace(meta={}))
    for missing in (None, ctx):
        envelope = verify_assertion(missing, "mail_guests", {})
        assert code(envelope) == "AUTH_REQUIRED" and envelope.is_error
        assert envelope["_meta"]["toolId"] == "mail_guests"
        assert envelope["_meta"]["mcpletType"] == "action"


def test_no_endpoint_is_service_unavailable(monkeypatch):
    monkeypatch.delenv("MCPLET_VERIFY_URL", raising=False)
    envelope = verify_assertion({"type": "passkey_assertion"}, "mail_guests", {})
    assert code(envelope) == "SERVICE_UNAVAILABLE" and envelope["error"]["retryable"] is False


def test_an_unreachable_host_is_service_unavailable_and_named(monkeypatch):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/x"
    envelope = verify_assertion({"type": "passkey_assertion"}, "mail_guests", {}, url=url)
    assert code(envelope) == "SERVICE_UNAVAILABLE" and envelope["error"]["retryable"] is True
    message = envelope["error"]["message"]
    assert message.startswith(f"the verify-assertion endpoint {url} is unreachable: ")
    assert "Connection refused" in message
    monkeypatch.setenv("MCPLET_VERIFY_URL", url)  # from the environment: the message says so
    envelope = verify_assertion({"type": "passkey_assertion"}, "mail_guests", {})
    assert f"{url} (set in MCPLET_VERIFY_URL) is unreachable" in envelope["error"]["message"]


def test_verified_then_refused_with_the_hosts_reason(approved, endpoint, verify_token, monkeypatch):
    monkeypatch.setenv("MCPLET_VERIFY_URL", endpoint)
    monkeypatch.setenv("MCPLET_VERIFY_TOKEN", verify_token)
    other = {**EMAIL_ARGS, "to": ["mallory@example.org"]}
    refused = anyio.run(averify_assertion, approved, "send_email", other)
    assert code(refused) == "AUTH_FAILED" and refused["error"]["message"].startswith("wrong_call")
    assert verify_assertion(approved, "send_email", EMAIL_ARGS) is None
    again = verify_assertion(approved, "send_email", EMAIL_ARGS)
    assert code(again) == "AUTH_FAILED" and "already_used" in again["error"]["message"]
    wrong_token = verify_assertion(approved, "send_email", EMAIL_ARGS, token="mcpv_nope")
    assert "unauthenticated" in wrong_token["error"]["message"]


MAIL = {"to": ["sato@example.jp", "kim@example.kr"], "body": "Free dessert tomorrow!"}


def test_a_strict_mcplet_runs_what_the_host_verified(
    strict_mailer, approver_client, authenticator, registry, eager, endpoint
):
    server, log = strict_mailer
    configure(server, endpoint)
    ceremony = gateway.call_tool(registry["dispatch"], "mail_guests", MAIL, "app").ceremony
    assert ceremony.enforcement == "strict" and log() == []
    credential = sign(approver_client, ceremony, authenticator)
    assert post_assertion(approver_client, ceremony, credential).status_code == 200
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.EXECUTED
    assert ceremony.result["result"] == {"sent": 2}
    assert log() == [{**MAIL, "verdict": "verified"}]


def test_a_strict_mcplet_refuses_what_the_host_did_not_verify(
    strict_mailer, approver_client, authenticator, registry, eager, endpoint
):
    server, log = strict_mailer
    BackendToken.authenticate(configure(server, endpoint)).revoke()
    ceremony = gateway.call_tool(registry["dispatch"], "mail_guests", MAIL, "app").ceremony
    credential = sign(approver_client, ceremony, authenticator)
    assert post_assertion(approver_client, ceremony, credential).status_code == 200
    ceremony.refresh_from_db()
    assert ceremony.result["error"]["code"] == "AUTH_FAILED"
    assert "sent" not in str(ceremony.result)
    (entry,) = log()
    assert entry["verdict"].startswith("unauthenticated")
