"""Passkey abuse: the approval views (challenge, callback, reject) approve exactly one call, for
a signed-in approver, with a passkey assertion made for this ceremony's challenge on this page's
origin and relying party, with the person verified, once.

Tried, with the project's software authenticator: replays, another ceremony's token or
challenge, another approver's challenge, users who may not approve and anonymous ones, no CSRF
token, wrong origins (in the header and in the signed client data), wrong rpId hashes, no user
verification, sign-count rollbacks, tampered client data, signatures and credential ids, and
hostile bodies. Each attempt: the call is still pending, resuming it runs nothing (the MCP
server's own log), and an audit event says why."""

import json

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url

from held import lifecycle
from held.models import Ceremony
from passkey.models import PasskeyCredential
from tests.passkey import conftest as passkey
from tests.passkey.authenticator import SoftAuthenticator
from tests.passkey.conftest import ORIGIN, RP_ID, hold_email, post_assertion, sign, url
from tests.security import workflow

approver, approver_client, authenticator, held, passkey_settings = (
    passkey.approver,
    passkey.approver_client,
    passkey.authenticator,
    passkey.held,
    passkey.passkey_settings,
)
calls, mcp, reference_server, shared = (
    workflow.calls,
    workflow.mcp,
    workflow.reference_server,
    workflow.shared,
)

pytestmark = pytest.mark.django_db

REFUSED = "mcplet.passkey.refused"


def because(reason=None):
    return {"event_type": REFUSED} | ({"details__reason": reason} if reason else {})


def still_pending(ceremony):
    """Nothing was approved: the call waits, and its resume (as a worker would run it) does
    nothing — the attempt's block then checks the server's log."""
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.PENDING
    lifecycle.resume(ceremony.pk)


def refused(response, status, reason=None):
    assert response.status_code == status, response.content
    if reason:
        assert response.json()["reason"] == reason, response.json()


def b64(data):
    return bytes_to_base64url(data)


def with_response(credential, **changes):
    return {**credential, "response": {**credential["response"], **changes}}


# --- replays, and another ceremony's or approver's challenge --------------------------------------


def test_replays(approver_client, authenticator, held, registry, attempts):
    """One assertion approves one call: posted again — to its ceremony, or to another — it is
    refused; so is an older assertion once a newer one was used (the sign count)."""
    other = hold_email(registry, {"to": ["kim@example.kr"], "body": "Another e-mail"})
    older = sign(approver_client, other, authenticator)
    credential = sign(approver_client, held, authenticator)
    response = post_assertion(approver_client, held, credential)
    assert response.status_code == 200, response.content
    for label, (ceremony, replay, status, reason) in {
        "the same assertion again": (held, credential, 403, "already_used"),
        "to another ceremony": (other, credential, 403, "wrong_ceremony"),
        "an older assertion after a newer one": (other, older, 403, "replayed"),
        "the older one again": (other, older, 403, None),
    }.items():
        with attempts.refused(label, **because(reason)):
            refused(post_assertion(approver_client, ceremony, replay), status, reason)
            if ceremony is other:
                still_pending(other)


def test_another_ceremonys_token_or_challenge(
    approver_client, authenticator, held, registry, attempts
):
    mine = hold_email(registry, {"to": ["kim@example.kr"], "body": "Mine"})
    signed_for_mine = sign(approver_client, mine, authenticator)
    signed_for_held = sign(approver_client, held, authenticator)
    unknown = Ceremony(token="x" * 32)
    for label, (ceremony, credential, status, reason) in {
        "my assertion, their token": (held, signed_for_mine, 403, "wrong_ceremony"),
        "their assertion, my token": (mine, signed_for_held, 403, "wrong_ceremony"),
        "an unknown token": (unknown, signed_for_held, 404, "unknown_ceremony"),
    }.items():
        with attempts.refused(label, **because(reason)):
            refused(post_assertion(approver_client, ceremony, credential), status, reason)
            still_pending(held), still_pending(mine)
    # A challenge never issued, or issued for the other call, signed by the right key.
    options = approver_client.post(url(mine, "challenge")).json()
    for label, challenge in {
        "a challenge never issued": b64(b"n" * 32),
        "the other call's challenge": options["publicKey"]["challenge"],
    }.items():
        credential = authenticator.get({"challenge": challenge, "rpId": RP_ID}, ORIGIN)
        with attempts.refused(label, **because()):
            response = post_assertion(approver_client, held, credential)
            assert response.status_code == 403, response.content
            still_pending(held)


def test_another_approvers_challenge(
    approver_client, authenticator, held, django_user_model, attempts
):
    """A second approver asks the challenge; the first signs it: the challenge was issued to
    someone else."""
    deputy = passkey.make_approver(django_user_model, "deputy", "deputy@example.org")
    deputy_client = Client()
    deputy_client.force_login(deputy)
    deputy_key = SoftAuthenticator()
    passkey.register(deputy_client, deputy_key, "deputy's key")
    theirs = deputy_client.post(url(held, "challenge")).json()
    credential = authenticator.get(theirs, ORIGIN)
    with attempts.refused("signed over the deputy's challenge", **because("wrong_user")):
        refused(post_assertion(approver_client, held, credential), 403, "wrong_user")
        still_pending(held)
    mine = sign(approver_client, held, authenticator)
    with attempts.refused("the approver's assertion, posted by the deputy", **because()):
        assert post_assertion(deputy_client, held, mine).status_code == 403
        still_pending(held)


# --- who asks -----------------------------------------------------------------------------------


def users(django_user_model):
    """Who may not approve: signed in without the permission (staff, even), inactive, or no
    one; and an approver without a passkey (may ask, cannot sign)."""
    plain = django_user_model.objects.create_user("guest", "g@example.org", "pw-guest-1")
    staff = django_user_model.objects.create_user("staff", "s@example.org", "pw-staff-1")
    staff.is_staff = True
    staff.save()
    staff.user_permissions.add(Permission.objects.get(codename="view_ceremony"))
    keyless = passkey.make_approver(django_user_model, "keyless", "k@example.org")
    clients = {"anonymous": Client()}
    for name, user in (("a plain user", plain), ("staff", staff), ("keyless", keyless)):
        clients[name] = Client()
        clients[name].force_login(user)
    return clients


def test_users_who_may_not_approve(
    approver_client, authenticator, held, django_user_model, attempts
):
    credential = sign(approver_client, held, authenticator)
    for who, client in users(django_user_model).items():
        may_ask = who == "keyless"
        status = 401 if who == "anonymous" else 403
        for step in ("challenge", "assertion", "reject"):
            if may_ask and step == "challenge":
                expected, reason = 409, "no_passkey"
            elif may_ask:
                expected, reason = 403, None  # another user's assertion / a call it may reject
            else:
                expected, reason = status, "not_an_approver"
            if may_ask and step == "reject":
                continue  # an approver may reject: not an attempt
            with attempts.refused(f"{who}: {step}", **because(reason)):
                if step == "assertion":
                    response = post_assertion(client, held, credential)
                else:
                    response = client.post(url(held, step))
                refused(response, expected, reason)
                still_pending(held)
        if not may_ask:
            with attempts.refused(f"{who}: the page", audited=False):
                response = client.get(url(held))
                assert response.status_code in (302, 403) and b"send_email" not in response.content
    # The approver still approves: nothing above decided the call.
    response = post_assertion(approver_client, held, sign(approver_client, held, authenticator))
    assert response.status_code == 200, response.content


def test_no_csrf_token(approver, authenticator, held, attempts):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(approver)
    credential = authenticator.get({"challenge": b64(b"c" * 32), "rpId": RP_ID}, ORIGIN)
    csrf = {"event_type": "http.csrf_refused"}
    for step in ("challenge", "assertion", "reject"):
        with attempts.refused(f"{step} without a CSRF token", **csrf):
            if step == "assertion":
                response = post_assertion(strict, held, credential)
            else:
                response = strict.post(url(held, step), HTTP_ORIGIN=ORIGIN)
            assert response.status_code == 403
            still_pending(held)


# --- where and how it was signed ----------------------------------------------------------------

WRONG_ORIGINS = [
    "https://evil.example",
    "null",
    "http://approve.example.test",
    "https://approve.example.test:8443",
    "https://approve.example.test.evil.example",
    "https://evil.approve.example.test",
    "https://APPROVE.example.test",
    f"{ORIGIN}/",
    "",
]


def test_wrong_origins(approver_client, authenticator, held, attempts):
    for origin in WRONG_ORIGINS:
        signed_right = sign(approver_client, held, authenticator)
        with attempts.refused(f"posted from {origin!r}", **because("wrong_origin")):
            response = post_assertion(approver_client, held, signed_right, origin=origin)
            refused(response, 403, "wrong_origin")
            still_pending(held)
        if not origin:
            continue
        signed_there = sign(approver_client, held, authenticator, origin=origin)
        with attempts.refused(f"signed on {origin!r}", **because("wrong_origin")):
            refused(post_assertion(approver_client, held, signed_there), 403, "wrong_origin")
            still_pending(held)


WRONG_RP_IDS = [
    "evil.example",
    "example.test",
    "APPROVE.example.test",
    "approve.example.test.",
    "approve.example.test.evil.example",
    "localhost",
]


def test_wrong_rp_id_hashes(approver_client, authenticator, held, attempts):
    for rp_id in WRONG_RP_IDS:
        credential = sign(approver_client, held, authenticator, rp_id=rp_id)
        with attempts.refused(f"signed for {rp_id!r}", **because("wrong_rp_id")):
            refused(post_assertion(approver_client, held, credential), 403, "wrong_rp_id")
            still_pending(held)


def test_no_user_verification_and_sign_count_rollbacks(
    approver_client, authenticator, held, attempts
):
    authenticator.user_verified = False
    credential = sign(approver_client, held, authenticator)
    with attempts.refused("user verification absent", **because("user_not_verified")):
        refused(post_assertion(approver_client, held, credential), 403, "user_not_verified")
        still_pending(held)
    authenticator.user_verified = True
    PasskeyCredential.objects.update(sign_count=100)  # what the passkey's last use left
    for label, count in {"to zero": 0, "by one": 99, "by ten": 90, "equal": 100}.items():
        authenticator.sign_count = count - 1  # it counts one up as it signs
        credential = sign(approver_client, held, authenticator)
        with attempts.refused(f"the sign count rolled back {label}", **because("replayed")):
            refused(post_assertion(approver_client, held, credential), 403, "replayed")
            still_pending(held)


def test_tampered_assertions(approver_client, authenticator, held, attempts):
    def client_data(credential, **changes):
        data = json.loads(base64url_to_bytes(credential["response"]["clientDataJSON"]))
        return b64(json.dumps({**data, **changes}).encode())

    def flipped(credential, field, at):
        data = bytearray(base64url_to_bytes(credential["response"][field]))
        data[at] ^= 1
        return b64(bytes(data))

    tampering = {
        "client data: another origin": lambda c: with_response(
            c, clientDataJSON=client_data(c, origin="https://evil.example")
        ),
        "client data: another type": lambda c: with_response(
            c, clientDataJSON=client_data(c, type="webauthn.create")
        ),
        "client data: another challenge": lambda c: with_response(
            c, clientDataJSON=client_data(c, challenge=b64(b"z" * 32))
        ),
        "client data: a field more": lambda c: with_response(
            c, clientDataJSON=client_data(c, crossOrigin=True)
        ),
        "authenticator data: the UP flag": lambda c: with_response(
            c, authenticatorData=flipped(c, "authenticatorData", 32)
        ),
        "authenticator data: the sign count": lambda c: with_response(
            c, authenticatorData=flipped(c, "authenticatorData", 36)
        ),
        "the signature's first byte": lambda c: with_response(
            c, signature=flipped(c, "signature", 0)
        ),
        "the signature's last byte": lambda c: with_response(
            c, signature=flipped(c, "signature", -1)
        ),
        "no signature": lambda c: with_response(c, signature=""),
        "another credential id": lambda c: {**c, "id": b64(b"k" * 32), "rawId": b64(b"k" * 32)},
        "a create response": lambda c: {**c, "type": "public-key-create"},
    }
    for label, tamper in tampering.items():
        credential = tamper(sign(approver_client, held, authenticator))
        with attempts.refused(label, **because()):
            response = post_assertion(approver_client, held, credential)
            assert response.status_code in (400, 403), (label, response.content)
            still_pending(held)


HOSTILE = {
    "empty": b"",
    "not JSON": b"approve",
    "a JSON list": b"[]",
    "NUL": b'{"id": "\\u0000", "type": "public-key"}',
    "a lone surrogate": b'{"id": "\\ud800", "type": "public-key"}',
    "1e400": b'{"id": 1e400}',
    "nested 3,000 deep": b'{"response": ' + b"[" * 3000 + b"]" * 3000 + b"}",
    "3 MB": b'{"id": "' + b"x" * 3_000_000 + b'"}',
}


def test_hostile_bodies(approver_client, authenticator, held, attempts):
    for label, body in HOSTILE.items():
        with attempts.refused(label, **because("malformed")):
            response = approver_client.generic(
                "POST",
                url(held, "assertion"),
                body,
                content_type="application/json",
                HTTP_ORIGIN=ORIGIN,
            )
            refused(response, 400, "malformed")
            still_pending(held)
