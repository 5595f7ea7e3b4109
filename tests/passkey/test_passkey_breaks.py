"""Passkey rules that one-line breaks used to slip past (issue 14): an approval needs the
authenticator to have verified the person (UV), and one sign count approves once, even when two
uses of it race."""

import pytest
from django.core.cache import cache
from webauthn.helpers import bytes_to_base64url

from held import lifecycle
from held.models import Ceremony
from mcplet_host.models import AuditEvent
from passkey.assertions import Refused, parse
from passkey.models import PasskeyCredential
from tests.passkey.conftest import ORIGIN, RP_ID, post_assertion, sign

pytestmark = pytest.mark.django_db


def refused_for(reason):
    return AuditEvent.objects.filter(
        event_type="mcplet.passkey.refused", details__reason=reason
    ).exists()


def test_an_assertion_without_user_verification_approves_nothing(
    approver_client, authenticator, held, calls
):
    authenticator.user_verified = False  # presence only: no PIN, no biometrics
    response = post_assertion(approver_client, held, sign(approver_client, held, authenticator))
    assert response.status_code == 403 and response.json()["reason"] == "user_not_verified"
    held.refresh_from_db()
    assert held.status == Ceremony.Status.PENDING and cache.get(held.assertion_key) is None
    lifecycle.resume(held.pk)
    assert calls() == [] and refused_for("user_not_verified")

    authenticator.user_verified = True  # the same passkey, with the person verified
    response = post_assertion(approver_client, held, sign(approver_client, held, authenticator))
    assert response.status_code == 200
    lifecycle.resume(held.pk)
    assert len(calls("send_email")) == 1


def test_verify_assertion_wants_user_verification_too(
    client, verify_token, approver_client, authenticator, held
):
    """The approval's challenge, signed again by the same key without UV: the MCPlet's check
    refuses it, and still verifies the approval's own assertion."""
    response = post_assertion(approver_client, held, sign(approver_client, held, authenticator))
    assert response.status_code == 200
    genuine = cache.get(held.assertion_key)
    authenticator.user_verified = False
    again = authenticator.get({"challenge": genuine["challenge"], "rpId": RP_ID}, ORIGIN)
    forged = {
        **genuine,
        "clientDataJSON": again["response"]["clientDataJSON"],
        "authenticatorData": again["response"]["authenticatorData"],
        "signature": again["response"]["signature"],
    }

    def ask(auth):
        body = {"mcplet_auth": auth, "tool": "send_email", "arguments": held.arguments}
        return client.post(
            "/auth/verify-assertion",
            body,
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {verify_token}",
        ).json()

    verdict = ask(forged)
    assert verdict["verified"] is False and verdict["reason"] == "user_not_verified"
    assert ask(genuine) == {"verified": True}


def test_two_uses_of_one_sign_count_approve_once(authenticator):
    """Two assertions carrying the same counter (a cloned authenticator), each checked against
    the passkey as it was read before either was recorded — what two callbacks racing do. The
    compare-and-swap on the stored count lets only the first through."""
    first_read = PasskeyCredential.objects.get()
    second_read = PasskeyCredential.objects.get()
    one, two = b"challenge-number-one-0123456789", b"challenge-number-two-0123456789"
    count = authenticator.sign_count
    a = authenticator.get({"challenge": bytes_to_base64url(one), "rpId": RP_ID}, ORIGIN)
    authenticator.sign_count = count  # the clone signs with the same counter
    b = authenticator.get({"challenge": bytes_to_base64url(two), "rpId": RP_ID}, ORIGIN)

    assert first_read.verify(parse(a)[0], challenge=one, origin=ORIGIN) == count + 1
    with pytest.raises(Refused) as refusal:
        second_read.verify(parse(b)[0], challenge=two, origin=ORIGIN)
    assert refusal.value.reason == "replayed"
    assert PasskeyCredential.objects.get().sign_count == count + 1
