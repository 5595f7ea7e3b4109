"""The ceremony's callback: a verified assertion approves exactly its call; every refusal leaves
the call unexecuted and is audited."""

import json
import time
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url

from held import lifecycle
from held.kinds import result as held_result
from held.models import Asker, Ceremony, arguments_hash
from mcplet_host import gateway
from mcplet_host.models import AuditEvent
from passkey.challenges import ChallengeRecord
from passkey.models import PasskeyCredential
from tests.passkey.authenticator import SoftAuthenticator
from tests.passkey.conftest import (
    ORIGIN,
    hold_email,
    make_approver,
    post_assertion,
    register,
    sign,
    url,
)

pytestmark = pytest.mark.django_db


def refusals(reason=None):
    events = AuditEvent.objects.filter(event_type="mcplet.passkey.refused")
    return [e.details for e in events if reason is None or e.details["reason"] == reason]


def assert_refused(response, status, reason, ceremony, calls):
    assert response.status_code == status, response.content
    assert response.json()["reason"] == reason
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.PENDING
    assert cache.get(ceremony.assertion_key) is None
    lifecycle.resume(ceremony.pk)
    assert calls() == []
    assert refusals(reason), f"no audit event for {reason}"


def test_a_strict_approval_injects_the_assertion_once(
    approver_client, approver, authenticator, held, calls
):
    credential = sign(approver_client, held, authenticator)
    response = post_assertion(approver_client, held, credential)
    assert response.status_code == 200 and response.json() == {"status": "approved"}

    held.refresh_from_db()
    assert held.status == Ceremony.Status.APPROVED and held.decided_by == approver
    auth = cache.get(held.assertion_key)
    assert set(auth) == {
        "type",
        "challenge",
        "clientDataJSON",
        "authenticatorData",
        "signature",
        "userHandle",
        "credentialId",
    }
    assert auth["type"] == "passkey_assertion"
    assert auth["signature"] == credential["response"]["signature"]
    assert auth["credentialId"] == authenticator.id
    assert auth["userHandle"] == bytes_to_base64url(PasskeyCredential.user_handle(approver))
    passkey = PasskeyCredential.objects.get()
    assert passkey.sign_count == authenticator.sign_count and passkey.last_used_at is not None
    granted = AuditEvent.objects.get(event_type="PERMISSION_GRANTED")
    assert granted.actor_id == "manager" and granted.target_tool == "send_email"

    lifecycle.resume(held.pk)
    (call,) = calls("send_email")
    assert call["meta"]["mcplet_auth"] == auth and call["arguments"] == held.arguments
    assert "mcplet_auth" not in call["arguments"]


def test_the_challenge_is_bound_to_the_exact_call(approver_client, authenticator, held):
    options = approver_client.post(url(held, "challenge")).json()["publicKey"]
    challenge = base64url_to_bytes(options["challenge"])
    assert options["rpId"] == "approve.example.test" and options["timeout"] <= 59_000
    assert options["allowCredentials"][0]["id"] == authenticator.id
    assert options["userVerification"] == "required"
    record = ChallengeRecord.find(challenge)
    assert record.binds(held.nonce, held.arguments_hash, challenge)
    other = arguments_hash("send_email", {**held.arguments, "to": ["mallory@example.org"]})
    assert not record.binds(held.nonce, other, challenge)
    # A fresh challenge each time, even for the same call.
    again = approver_client.post(url(held, "challenge")).json()["publicKey"]["challenge"]
    assert again != options["challenge"]
    # Short-lived, in the cache only.
    assert 0 < record.expires - time.time() < 60


def test_host_only_calls_and_results_are_approved_without_an_assertion(
    approver_client, authenticator, registry, calls
):
    plan = gateway.call_tool(registry["planning"], "approve_plan", {}, "model").ceremony
    assert plan.enforcement == "host-only"
    response = post_assertion(approver_client, plan, sign(approver_client, plan, authenticator))
    assert response.status_code == 200
    assert cache.get(plan.assertion_key) is None
    lifecycle.resume(plan.pk)
    (call,) = calls("approve_plan")
    assert "mcplet_auth" not in call["meta"]

    result = held_result.hold(Asker("planning-agent"), {"plan": "x"}, "Hand it on?")
    credential = sign(approver_client, result, authenticator)
    assert post_assertion(approver_client, result, credential).status_code == 200
    result.refresh_from_db()
    assert result.status == Ceremony.Status.EXECUTED and result.result["approved"] is True
    assert cache.get(result.assertion_key) is None


def test_reject_runs_nothing(approver_client, authenticator, held, calls):
    credential = sign(approver_client, held, authenticator)
    response = approver_client.post(url(held, "reject"))
    assert response.status_code == 200 and response.json() == {"status": "rejected"}
    lifecycle.resume(held.pk)
    held.refresh_from_db()
    assert held.status == Ceremony.Status.REJECTED and calls() == []
    assert held.result["error"]["code"] == "X_APPROVAL_REJECTED"
    assert AuditEvent.objects.get(event_type="PERMISSION_DENIED").actor_id == "manager"
    late = post_assertion(approver_client, held, credential)
    assert late.status_code == 410 and late.json()["reason"] == "not_pending"
    assert approver_client.post(url(held, "reject")).status_code == 410


# --- refusals ---------------------------------------------------------------------------------


def test_a_replayed_assertion(approver_client, authenticator, held, calls):
    credential = sign(approver_client, held, authenticator)
    assert post_assertion(approver_client, held, credential).status_code == 200
    Ceremony.objects.filter(pk=held.pk).update(status=Ceremony.Status.PENDING)  # even so
    cache.delete(held.assertion_key)
    replay = post_assertion(approver_client, held, credential)
    assert_refused(replay, 403, "already_used", held, calls)


def test_an_older_assertion_fails_on_the_sign_count(
    approver_client, authenticator, registry, calls
):
    first, second = hold_email(registry), hold_email(registry, {"to": ["a@b.c"], "body": "x"})
    older = sign(approver_client, first, authenticator)  # counter n
    newer = sign(approver_client, second, authenticator)  # counter n + 1
    assert post_assertion(approver_client, second, newer).status_code == 200
    calls_before = len(calls())
    response = post_assertion(approver_client, first, older)
    assert response.status_code == 403 and response.json()["reason"] == "replayed"
    first.refresh_from_db()
    assert first.status == Ceremony.Status.PENDING and len(calls()) == calls_before
    assert refusals("replayed")


def test_an_assertion_for_another_call(approver_client, authenticator, registry, calls):
    """Signed for one e-mail, posted to the callback of another ceremony: refused."""
    mine = hold_email(registry)
    other = hold_email(registry, {"to": ["mallory@example.org"], "body": "Send me the list"})
    credential = sign(approver_client, mine, authenticator)
    response = post_assertion(approver_client, other, credential)
    assert_refused(response, 403, "wrong_ceremony", other, calls)
    mine.refresh_from_db()
    assert mine.status == Ceremony.Status.PENDING


def test_arguments_changed_after_the_challenge(approver_client, authenticator, held, calls):
    credential = sign(approver_client, held, authenticator)
    changed = {**held.arguments, "to": ["mallory@example.org"]}
    Ceremony.objects.filter(pk=held.pk).update(
        arguments=changed, arguments_hash=arguments_hash("send_email", changed)
    )
    response = post_assertion(approver_client, held, credential)
    assert_refused(response, 403, "wrong_call", held, calls)


@pytest.mark.parametrize(
    ("signed_on", "sent_from", "reason"),
    [
        ("https://evil.example", ORIGIN, "wrong_origin"),  # clientDataJSON's origin
        (ORIGIN, "https://evil.example", "wrong_origin"),  # the callback's Origin header
    ],
)
def test_a_wrong_origin(approver_client, authenticator, held, calls, signed_on, sent_from, reason):
    credential = sign(approver_client, held, authenticator, origin=signed_on)
    response = post_assertion(approver_client, held, credential, origin=sent_from)
    assert_refused(response, 403, reason, held, calls)


def test_a_wrong_rp_id(approver_client, authenticator, held, calls):
    credential = sign(approver_client, held, authenticator, rp_id="evil.example")
    response = post_assertion(approver_client, held, credential)
    assert_refused(response, 403, "wrong_rp_id", held, calls)


def test_a_bad_signature(approver_client, authenticator, held, calls):
    credential = sign(approver_client, held, authenticator)
    signature = bytearray(base64url_to_bytes(credential["response"]["signature"]))
    signature[-1] ^= 1
    credential["response"]["signature"] = bytes_to_base64url(bytes(signature))
    response = post_assertion(approver_client, held, credential)
    assert_refused(response, 403, "bad_signature", held, calls)


def test_an_unknown_challenge(approver_client, authenticator, held, calls):
    options = {"challenge": bytes_to_base64url(b"x" * 32), "rpId": "approve.example.test"}
    response = post_assertion(approver_client, held, authenticator.get(options, ORIGIN))
    assert_refused(response, 403, "unknown_challenge", held, calls)


def test_an_expired_challenge(approver_client, authenticator, held, calls):
    credential = sign(approver_client, held, authenticator)
    record = ChallengeRecord.find(base64url_to_bytes(credential_challenge(credential)))
    record.expires = time.time() - 1
    record.save()
    response = post_assertion(approver_client, held, credential)
    assert_refused(response, 403, "expired", held, calls)


def test_an_expired_ceremony(approver_client, authenticator, held, calls):
    credential = sign(approver_client, held, authenticator)
    Ceremony.objects.filter(pk=held.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    refused = approver_client.post(url(held, "challenge"))
    assert refused.status_code == 410 and refused.json()["reason"] == "expired"
    response = post_assertion(approver_client, held, credential)
    assert_refused(response, 410, "expired", held, calls)


# A lone surrogate (percent-encoded), a backslash, a long token, an overlong NUL, 1e400.
HOSTILE_TOKENS = ["no-such-token", "%ED%A0%80", "a%5Cb", "x" * 3000, "%C0%80", "1e400"]


@pytest.mark.parametrize("token", HOSTILE_TOKENS)
def test_an_unknown_ceremony(approver_client, authenticator, held, calls, token):
    credential = sign(approver_client, held, authenticator)
    response = approver_client.post(
        f"/passkey/ceremonies/{token}/assertion/",
        credential,
        content_type="application/json",
        HTTP_ORIGIN=ORIGIN,
    )
    assert response.status_code == 404 and response.json()["reason"] == "unknown_ceremony"
    challenge = approver_client.post(f"/passkey/ceremonies/{token}/challenge/")
    assert challenge.status_code == 404 and challenge.json()["reason"] == "unknown_ceremony"
    held.refresh_from_db()
    assert held.status == Ceremony.Status.PENDING and calls() == []
    assert sorted(r["stage"] for r in refusals("unknown_ceremony")) == ["callback", "challenge"]


def test_another_approvers_challenge(
    approver_client, authenticator, held, calls, django_user_model
):
    colleague = Client()
    colleague.force_login(make_approver(django_user_model, "second", "second@example.org"))
    register(colleague, SoftAuthenticator(), "theirs")
    theirs = colleague.post(url(held, "challenge")).json()
    credential = authenticator.get(theirs, ORIGIN)
    response = post_assertion(approver_client, held, credential)
    assert_refused(response, 403, "wrong_user", held, calls)


def test_a_revoked_passkey(approver_client, authenticator, held, calls):
    credential = sign(approver_client, held, authenticator)
    PasskeyCredential.objects.get().revoke()
    response = post_assertion(approver_client, held, credential)
    assert_refused(response, 403, "unknown_credential", held, calls)


@pytest.mark.parametrize(
    ("credential_id", "reason"),
    [
        ("a\x00b", "malformed"),
        ("\ud800", "malformed"),
        ("1e400", "malformed"),
        ("x" * 5000, "unknown_credential"),
        ("a\\b", "unknown_credential"),
    ],
)
def test_a_hostile_credential_id(
    approver_client, authenticator, held, calls, credential_id, reason
):
    credential = sign(approver_client, held, authenticator)
    credential["id"] = credential["rawId"] = credential_id
    response = post_assertion(approver_client, held, credential)
    assert_refused(response, 400 if reason == "malformed" else 403, reason, held, calls)


def test_malformed_bodies(approver_client, authenticator, held, calls):
    response = post_assertion(approver_client, held, {"id": "x"})
    assert_refused(response, 400, "malformed", held, calls)


def test_localhost_mode_takes_no_approval_on_the_hosts_port(
    approver_client, authenticator, held, calls, settings
):
    credential = sign(approver_client, held, authenticator)
    settings.PASSKEY_MODE = "localhost"
    response = post_assertion(approver_client, held, credential)
    assert_refused(response, 403, "loopback_only", held, calls)


def credential_challenge(credential):
    client_data = base64url_to_bytes(credential["response"]["clientDataJSON"])
    return json.loads(client_data)["challenge"]
