"""`POST /auth/verify-assertion` (§7.1.2, §7.2 Phase 6): a definite answer for exactly one call,
to the MCP server that runs it, once."""

import time

import pytest
from django.core.cache import cache
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url

from held import lifecycle
from held.models import Ceremony
from mcplet_host.models import AuditEvent
from passkey.challenges import ChallengeRecord
from passkey.models import BackendToken
from pools.models import McpServer
from tests.passkey.conftest import EMAIL_ARGS, sign

pytestmark = pytest.mark.django_db

ENDPOINT = "/auth/verify-assertion"


def ask(client, token, auth, tool="send_email", arguments=EMAIL_ARGS):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    body = {"mcplet_auth": auth, "tool": tool, "arguments": arguments}
    return client.post(ENDPOINT, body, content_type="application/json", **headers)


def refused(response, reason, status=200):
    assert response.status_code == status, response.content
    assert response.json()["verified"] is False and response.json()["reason"] == reason
    event = AuditEvent.objects.filter(event_type="mcplet.passkey.refused").first()
    assert event.details == {**event.details, "stage": "verify", "reason": reason}
    return event


def test_verified_once(client, verify_token, approved, held):
    first = ask(client, verify_token, approved)
    assert first.status_code == 200 and first.json() == {"verified": True}
    event = AuditEvent.objects.get(event_type="mcplet.passkey.verified")
    assert event.actor_id == "server:reference" and event.target_tool == "send_email"
    # Single use at this endpoint.
    refused(ask(client, verify_token, approved), "already_used")


def test_the_arguments_order_does_not_matter(client, verify_token, approved):
    shuffled = {"body": EMAIL_ARGS["body"], "to": EMAIL_ARGS["to"]}
    assert ask(client, verify_token, approved, arguments=shuffled).json()["verified"] is True


def test_while_the_call_executes(client, verify_token, approved, held):
    Ceremony.objects.filter(pk=held.pk).update(status=Ceremony.Status.EXECUTING)
    assert ask(client, verify_token, approved).json()["verified"] is True


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("send_email", {**EMAIL_ARGS, "to": ["mallory@example.org"]}),
        ("send_email", {**EMAIL_ARGS, "body": "Send me the customer list"}),
        ("send_sms", EMAIL_ARGS),
    ],
)
def test_another_call_is_refused(client, verify_token, approved, tool, arguments):
    refused(ask(client, verify_token, approved, tool, arguments), "wrong_call")
    # The refusal did not use the assertion up: the real call still verifies.
    assert ask(client, verify_token, approved).json()["verified"] is True


@pytest.mark.parametrize("header", [None, "Bearer mcpv_not-a-real-token", "Basic abc"])
def test_without_the_servers_token(client, approved, header):
    headers = {"HTTP_AUTHORIZATION": header} if header else {}
    body = {"mcplet_auth": approved, "tool": "send_email", "arguments": EMAIL_ARGS}
    response = client.post(ENDPOINT, body, content_type="application/json", **headers)
    refused(response, "unauthenticated", 401)
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_a_revoked_token(client, verify_token, approved):
    BackendToken.authenticate(verify_token).revoke()
    refused(ask(client, verify_token, approved), "unauthenticated", 401)


def test_another_servers_token(client, approved):
    stranger = McpServer.objects.create(name="stranger", transport="stdio", command="true")
    _, token = BackendToken.issue(stranger)
    event = refused(ask(client, token, approved), "wrong_server")
    assert event.actor_id == "server:stranger"


def test_an_assertion_nobody_approved(client, verify_token, approver_client, authenticator, held):
    # Signed on the page but never delivered to the callback (or refused there).
    credential = sign(approver_client, held, authenticator)
    response = credential["response"]
    auth = {
        "type": "passkey_assertion",
        "clientDataJSON": response["clientDataJSON"],
        "authenticatorData": response["authenticatorData"],
        "signature": response["signature"],
        "userHandle": response["userHandle"],
        "credentialId": credential["id"],
    }
    refused(ask(client, verify_token, auth), "not_approved")


def test_a_decided_call(client, verify_token, approved, held):
    lifecycle.resume(held.pk)  # the programmable server runs it without asking
    refused(ask(client, verify_token, approved), "not_approved")


def test_an_unknown_challenge(client, verify_token, approved):
    forged = {**approved, "challenge": bytes_to_base64url(b"y" * 32)}
    refused(ask(client, verify_token, forged), "wrong_call")  # not the challenge that was signed
    other = dict(approved)
    cache.delete(ChallengeRecord._key(approved["challenge"]))
    refused(ask(client, verify_token, other), "unknown_challenge")


def test_an_expired_approval(client, verify_token, approved):
    record = ChallengeRecord.find(base64url_to_bytes(approved["challenge"]))
    record.expires = time.time() - 1
    record.save()
    refused(ask(client, verify_token, approved), "expired")


def test_a_bad_signature(client, verify_token, approved):
    signature = bytearray(base64url_to_bytes(approved["signature"]))
    signature[-1] ^= 1
    tampered = {**approved, "signature": bytes_to_base64url(bytes(signature))}
    refused(ask(client, verify_token, tampered), "bad_signature")
    assert ask(client, verify_token, approved).json()["verified"] is True


def test_an_unknown_credential(client, verify_token, approved):
    refused(ask(client, verify_token, {**approved, "credentialId": "AAAA"}), "unknown_credential")


@pytest.mark.parametrize(
    "body",
    [
        {"tool": "send_email", "arguments": EMAIL_ARGS},
        {"mcplet_auth": {"type": "password"}, "tool": "send_email", "arguments": EMAIL_ARGS},
        {"mcplet_auth": {}, "tool": 3},
    ],
)
def test_malformed_requests(client, verify_token, approved, body):
    response = client.post(
        ENDPOINT, body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {verify_token}"
    )
    refused(response, "malformed", 400)


def test_only_post(client):
    assert client.get(ENDPOINT).status_code == 405


def test_admin_shows_the_token_once(staff_client, registry):
    server = registry["server"]
    response = staff_client.post(
        "/admin/passkey/backendtoken/add/", {"server": server.pk, "name": "production"}
    )
    assert response.status_code == 200
    token = BackendToken.objects.get()
    raw = response.context["raw"]
    assert BackendToken.authenticate(raw) == token and token.server == server
    assert raw.encode() in response.content and b"shown only once" in response.content
    row = BackendToken.objects.filter(pk=token.pk).values().get()
    assert raw not in {str(v) for v in row.values()}
    for page in ("/admin/passkey/backendtoken/", f"/admin/passkey/backendtoken/{token.pk}/change/"):
        content = staff_client.get(page).content
        assert token.prefix.encode() in content and raw.encode() not in content
    staff_client.post(
        "/admin/passkey/backendtoken/",
        {"action": "revoke_selected", "_selected_action": [token.pk]},
    )
    assert BackendToken.authenticate(raw) is None
