"""Verify-assertion abuse: `POST /auth/verify-assertion`, which a strict MCPlet asks before it
acts, says yes once — to the server the approved call goes to, for exactly that call — and
answers everything else (no, a wrong or another server's token; other arguments or another tool;
a replay; an expired approval; hostile bodies) with a definite no or a clear 4xx and an audit
event, never a 500. End to end, the mail MCPlet that asks it never sends what was not verified
(its own log)."""

import json
import time

import pytest
from django.core.cache import cache
from django.test import Client
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url

from a2a.models import PartnerKey
from held import lifecycle
from held.models import Ceremony
from mcplet_host import gateway
from passkey.challenges import ChallengeRecord
from passkey.models import BackendToken
from pools.models import McpServer
from tests.passkey import conftest as passkey
from tests.passkey.authenticator import SoftAuthenticator
from tests.passkey.conftest import EMAIL_ARGS, configure, post_assertion, sign
from tests.security import workflow
from tests.security.workflow import spellings

# The passkey fixtures (HTTPS mode, an approver with a registered key, a held e-mail and its
# approval) on the module's one MCP server.
approved, approver, approver_client, authenticator, held, passkey_settings, verify_token = (
    passkey.approved,
    passkey.approver,
    passkey.approver_client,
    passkey.authenticator,
    passkey.held,
    passkey.passkey_settings,
    passkey.verify_token,
)
strict_mailer = passkey.strict_mailer
calls, mcp, reference_server, shared = (
    workflow.calls,
    workflow.mcp,
    workflow.reference_server,
    workflow.shared,
)

pytestmark = pytest.mark.django_db

ENDPOINT = "/auth/verify-assertion"
REFUSED = "mcplet.passkey.refused"


def ask(client, auth, tool="send_email", arguments=EMAIL_ARGS, authorization=None, **extra):
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    body = {"mcplet_auth": auth, "tool": tool, "arguments": arguments, **extra}
    return client.post(ENDPOINT, body, content_type="application/json", **headers)


def because(reason=None):
    """The audit event an attempt must leave: a refusal (for `reason`)."""
    return {"event_type": REFUSED} | ({"details__reason": reason} if reason else {})


def bearer(token):
    return f"Bearer {token}"


def said_no(response, reason, status=200):
    assert response.status_code == status, response.content
    verdict = response.json()
    assert verdict["verified"] is False and verdict["reason"] == reason, verdict


def verifies_once(client, approved, token):
    """The genuine call verifies, once: the refusals before used nothing up."""
    assert ask(client, approved, authorization=bearer(token)).json() == {"verified": True}
    said_no(ask(client, approved, authorization=bearer(token)), "already_used")


# --- who asks ---------------------------------------------------------------------------------


def test_no_wrong_or_foreign_token(client, attempts, approved, verify_token, registry):
    stranger = McpServer.objects.create(name="stranger", transport="stdio", command="true")
    _, revoked = BackendToken.issue(registry["server"], "old")
    BackendToken.authenticate(revoked).revoke()
    _, partner_key = PartnerKey.issue(registry["partner"], "not a verify token")
    unauthenticated = {
        "none": None,
        "empty bearer": "Bearer",
        "bearer and a space": "Bearer ",
        "truncated": bearer(verify_token[:-1]),
        "one character more": bearer(verify_token + "x"),
        "upper case": bearer(verify_token.upper()),
        "prefix only": bearer(verify_token[:13]),
        "made up": bearer("mcpv_" + "A" * 43),
        "twice": f"Bearer {verify_token} {verify_token}",
        "Basic": f"Basic {verify_token}",
        "Token": f"Token {verify_token}",
        "no scheme": verify_token,
        "latin-1": bearer(verify_token[:-1] + "é"),
        "revoked": bearer(revoked),
        "a partner's API key": bearer(partner_key),
    }
    for label, authorization in unauthenticated.items():
        with attempts.refused(label, **because("unauthenticated")):
            response = ask(client, approved, authorization=authorization)
            said_no(response, "unauthenticated", 401)
            assert response["WWW-Authenticate"].startswith("Bearer")
    elsewhere = {
        "in the query": f"{ENDPOINT}?token={verify_token}",
        "in the body": ENDPOINT,
    }
    for label, path in elsewhere.items():
        with attempts.refused(label, **because("unauthenticated")):
            body = {"mcplet_auth": approved, "tool": "send_email", "arguments": EMAIL_ARGS}
            body["token"] = verify_token
            response = client.post(path, body, content_type="application/json")
            said_no(response, "unauthenticated", 401)
    _, foreign = BackendToken.issue(stranger)
    with attempts.refused("another server's", **because("wrong_server")):
        said_no(ask(client, approved, authorization=bearer(foreign)), "wrong_server")
    verifies_once(client, approved, verify_token)


# --- for what ---------------------------------------------------------------------------------


def other_arguments():
    to, body = EMAIL_ARGS["to"], EMAIL_ARGS["body"]
    return {
        "another recipient": {"to": ["mallory@example.org"], "body": body},
        "one recipient more": {"to": [*to, "mallory@example.org"], "body": body},
        "one recipient less": {"to": to[:1], "body": body},
        "recipients reordered": {"to": to[::-1], "body": body},
        "a recipient as a string": {"to": to[0], "body": body},
        "a confusable recipient": {"to": [to[0].replace("a", "\u0430"), to[1]], "body": body},
        "another body": {"to": to, "body": "Send me the customer list"},
        "a trailing space": {"to": to, "body": body + " "},
        "a zero-width space": {"to": to, "body": body[:4] + "\u200b" + body[4:]},
        "upper case": {"to": to, "body": body.upper()},
        "a key more": {"to": to, "body": body, "cc": ["mallory@example.org"]},
        "a _meta key": {"to": to, "body": body, "_meta": {"mcplet_auth": "forged"}},
        "no arguments": {},
        "nested": {"arguments": EMAIL_ARGS},
        "numbers for strings": {"to": [1, 2], "body": 3},
    }


def test_an_assertion_for_other_arguments_or_another_tool(client, attempts, approved, verify_token):
    for label, arguments in other_arguments().items():
        with attempts.refused(label, **because("wrong_call")):
            auth = bearer(verify_token)
            response = ask(client, approved, arguments=arguments, authorization=auth)
            said_no(response, "wrong_call")
    tools = {f"send_email {how}": name for how, name in spellings("send_email").items()}
    tools |= {"another action": "post_sns", "another tool": "approve_plan", "no name": ""}
    del tools["send_email exact"]
    for label, tool in tools.items():
        with attempts.refused(label, **because("wrong_call")):
            said_no(ask(client, approved, tool, authorization=bearer(verify_token)), "wrong_call")
    verifies_once(client, approved, verify_token)


def test_another_ceremonys_assertion(client, attempts, registry, approver_client, authenticator):
    """Two e-mails approved: each assertion verifies its own call only."""
    mine = passkey.hold_email(registry)
    theirs = passkey.hold_email(registry, {"to": ["kim@example.kr"], "body": "Dessert"})
    auth = {}
    for ceremony in (mine, theirs):
        credential = sign(approver_client, ceremony, authenticator)
        assert post_assertion(approver_client, ceremony, credential).status_code == 200
        auth[ceremony.pk] = cache.get(ceremony.assertion_key)
    _, token = BackendToken.issue(registry["server"])
    for label, (assertion, arguments) in {
        "mine for theirs": (auth[mine.pk], theirs.arguments),
        "theirs for mine": (auth[theirs.pk], mine.arguments),
    }.items():
        with attempts.refused(label, **because("wrong_call")):
            response = ask(client, assertion, arguments=arguments, authorization=bearer(token))
            said_no(response, "wrong_call")


# --- when -------------------------------------------------------------------------------------


def test_a_replay(client, attempts, approved, verify_token):
    verified = ask(client, approved, authorization=bearer(verify_token))
    assert verified.json() == {"verified": True}
    replays = {
        "as it was": approved,
        "keys reordered": dict(reversed(approved.items())),
        "without its challenge": {k: v for k, v in approved.items() if k != "challenge"},
        "without its user handle": {k: v for k, v in approved.items() if k != "userHandle"},
    }
    for label, auth in replays.items():
        for shuffled in (EMAIL_ARGS, dict(reversed(EMAIL_ARGS.items()))):
            with attempts.refused(label, **because("already_used")):
                response = ask(client, auth, arguments=shuffled, authorization=bearer(verify_token))
                said_no(response, "already_used")


def test_an_expired_or_undecided_approval(client, attempts, approved, verify_token, held):
    record = ChallengeRecord.find(base64url_to_bytes(approved["challenge"]))
    expires = record.expires
    record.expires = time.time() - 1
    record.save()
    with attempts.refused("the approval's window passed", **because("expired")):
        said_no(ask(client, approved, authorization=bearer(verify_token)), "expired")
    record.expires = expires
    record.save()
    for status in set(Ceremony.Status) - {Ceremony.Status.APPROVED, Ceremony.Status.EXECUTING}:
        Ceremony.objects.filter(pk=held.pk).update(status=status)
        with attempts.refused(f"a {status} call", **because("not_approved")):
            said_no(ask(client, approved, authorization=bearer(verify_token)), "not_approved")
    Ceremony.objects.filter(pk=held.pk).update(status=Ceremony.Status.APPROVED)
    verifies_once(client, approved, verify_token)


def test_a_tampered_or_foreign_assertion(
    client, attempts, approved, verify_token, approver_client, django_user_model
):
    signature = base64url_to_bytes(approved["signature"])
    auth_data = base64url_to_bytes(approved["authenticatorData"])
    client_data = json.loads(base64url_to_bytes(approved["clientDataJSON"]))

    def flipped(data, at):
        data = bytearray(data)
        data[at] ^= 1
        return bytes_to_base64url(bytes(data))

    def client_data_with(**changes):
        return bytes_to_base64url(json.dumps({**client_data, **changes}).encode())

    # A second approver's own key: registered, but not the one that approved.
    other = passkey.make_approver(django_user_model, "deputy", "deputy@example.org")
    other_client = Client()
    other_client.force_login(other)
    other_key = SoftAuthenticator()
    passkey.register(other_client, other_key, "deputy's key")
    tampered = {
        **{f"signature bit {at}": {"signature": flipped(signature, at)} for at in (0, 10, -1)},
        "the UP flag cleared": {"authenticatorData": flipped(auth_data, 32)},
        "the sign count raised": {"authenticatorData": flipped(auth_data, 36)},
        "the rpId hash": {"authenticatorData": flipped(auth_data, 0)},
        "the origin": {"clientDataJSON": client_data_with(origin="https://evil.example")},
        "the type": {"clientDataJSON": client_data_with(type="webauthn.create")},
        "cross-origin": {"clientDataJSON": client_data_with(crossOrigin=True)},
        "an unknown credential": {"credentialId": "AAAA"},
        "another approver's credential": {"credentialId": other_key.id},
        "another type": {"type": "password"},
        "no type": {"type": None},
        "an empty signature": {"signature": ""},
    }
    for label, change in tampered.items():
        with attempts.refused(label, **because()):
            response = ask(client, {**approved, **change}, authorization=bearer(verify_token))
            assert response.status_code in (200, 400) and response.json()["verified"] is False
    verifies_once(client, approved, verify_token)


# --- hostile bodies ---------------------------------------------------------------------------


def hostile_bodies(approved):
    """Raw bodies: (label, bytes). Each is refused as malformed (400), before anything else."""
    genuine = {"mcplet_auth": approved, "tool": "send_email", "arguments": EMAIL_ARGS}

    def raw(text):
        return text.encode("utf-8", "surrogatepass")

    def with_(**changes):
        return raw(json.dumps({**genuine, **changes}))

    deep = b'"arguments": ' + b"[" * 3000 + b"]" * 3000
    nested = {}
    for _ in range(100):
        nested = {"n": nested}
    return {
        "empty": b"",
        "not JSON": b"verify me",
        "truncated JSON": with_()[:-1],
        "a JSON array": b"[]",
        "a JSON string": b'"yes"',
        "null": b"null",
        "invalid UTF-8": b'{"tool": "\xff\xfe"}',
        "NUL in the tool": with_(tool="send_email\x00"),
        "NUL in an argument": with_(arguments={**EMAIL_ARGS, "body": "x\x00y"}),
        "NUL in a key": with_(arguments={"to\x00": EMAIL_ARGS["to"], "body": "x"}),
        "NUL in mcplet_auth": with_(mcplet_auth={**approved, "signature": "\x00"}),
        "a lone surrogate in the tool": raw(json.dumps({**genuine, "tool": "send\ud800"})),
        "a lone surrogate in an argument": with_(arguments={"to": ["\udc00"], "body": "x"}),
        "a lone surrogate in mcplet_auth": with_(mcplet_auth={**approved, "type": "\ud800"}),
        "1e400": with_(arguments={**EMAIL_ARGS, "n": 1}).replace(b'"n": 1', b'"n": 1e400'),
        "-1e400": with_(arguments={**EMAIL_ARGS, "n": 1}).replace(b'"n": 1', b'"n": -1e400'),
        "NaN": with_(arguments={**EMAIL_ARGS, "n": 1}).replace(b'"n": 1', b'"n": NaN'),
        "Infinity": with_(arguments={**EMAIL_ARGS, "n": 1}).replace(b'"n": 1', b'"n": Infinity'),
        "nested 3,000 deep": with_(arguments=0).replace(b'"arguments": 0', deep),
        "mcplet_auth nested 100 deep": with_(mcplet_auth={**approved, "type": nested}),
        "3 MB": with_(arguments={**EMAIL_ARGS, "body": "x" * 3_000_000}),
        "the tool a number": with_(tool=3),
        "the tool a list": with_(tool=["send_email"]),
        "the tool null": with_(tool=None),
        "no tool": raw(json.dumps({"mcplet_auth": approved, "arguments": EMAIL_ARGS})),
        "arguments a list": with_(arguments=[EMAIL_ARGS]),
        "arguments a string": with_(arguments=json.dumps(EMAIL_ARGS)),
        "arguments null": with_(arguments=None),
        "no mcplet_auth": raw(json.dumps({"tool": "send_email", "arguments": EMAIL_ARGS})),
        "mcplet_auth a list": with_(mcplet_auth=[approved]),
        "mcplet_auth a string": with_(mcplet_auth=json.dumps(approved)),
        "mcplet_auth null": with_(mcplet_auth=None),
        "mcplet_auth fields not strings": with_(mcplet_auth={**approved, "signature": 7}),
    }


def test_hostile_bodies_are_a_clear_400(client, attempts, approved, verify_token):
    for label, body in hostile_bodies(approved).items():
        for token, status, reason in (
            (verify_token, 400, "malformed"),
            (None, 401, "unauthenticated"),
        ):
            with attempts.refused(f"{label}, token {bool(token)}", **because(reason)):
                headers = {"HTTP_AUTHORIZATION": bearer(token)} if token else {}
                response = client.generic(
                    "POST", ENDPOINT, body, content_type="application/json", **headers
                )
                said_no(response, reason, status)
    verifies_once(client, approved, verify_token)


# --- end to end: the mail MCPlet sends only what was verified ----------------------------------

MAIL = {"to": ["sato@example.jp", "kim@example.kr"], "body": "Free dessert tomorrow!"}


@pytest.mark.django_db(transaction=True)
def test_the_mail_mcplet_never_sends_what_was_not_verified(
    client, attempts, live_server, strict_mailer, registry, approver_client, authenticator
):
    server, log = strict_mailer
    endpoint = f"{live_server.url}{ENDPOINT}"
    token = configure(server, endpoint)

    def sent():
        return [entry for entry in log() if entry["verdict"] == "verified"]

    def approve(arguments=MAIL):
        ceremony = gateway.call_tool(registry["dispatch"], "mail_guests", arguments, "app").ceremony
        credential = sign(approver_client, ceremony, authenticator)
        assert post_assertion(approver_client, ceremony, credential).status_code == 200
        return ceremony

    def resumed(ceremony):
        lifecycle.resume(ceremony.pk)  # the approval's task, here rather than in a worker
        ceremony.refresh_from_db()
        assert ceremony.status == Ceremony.Status.FAILED, ceremony.result
        return ceremony.result["error"]

    with attempts.refused("the mailer's token revoked", calls=sent, **because()):
        BackendToken.authenticate(token).revoke()
        assert resumed(approve())["message"].startswith("unauthenticated")
    stranger = McpServer.objects.create(name="stranger", transport="stdio", command="true")
    _, foreign = BackendToken.issue(stranger)
    with attempts.refused("another server's token", calls=sent, **because()):
        server.env |= {"MCPLET_VERIFY_TOKEN": foreign}
        server.save(update_fields=["env"])
        assert resumed(approve())["message"].startswith("wrong_server")
    token = configure(server, endpoint)

    with attempts.refused("an assertion verified before the mailer asked", calls=sent, **because()):
        ceremony = approve()
        stolen = cache.get(ceremony.assertion_key)
        assert ask(client, stolen, "mail_guests", MAIL, bearer(token)).json()["verified"]
        assert resumed(ceremony)["message"].startswith("already_used")

    with attempts.refused("another approval's assertion", calls=sent, **because()):
        mine, theirs = approve(), approve({"to": ["mallory@example.org"], "body": "The list"})
        cache.set(theirs.assertion_key, cache.get(mine.assertion_key))
        assert resumed(theirs)["message"].startswith("wrong_call")
    assert log()[-1]["to"] == ["mallory@example.org"] and sent() == []

    edited = {**MAIL, "to": ["mallory@example.org"]}
    blocked = {"event_type": "TOOL_BLOCKED", "details__rule": "approval"}
    with attempts.refused("arguments edited after the approval", calls=sent, **blocked):
        ceremony = approve()
        Ceremony.objects.filter(pk=ceremony.pk).update(arguments=edited)
        assert resumed(ceremony)["code"] == "AUTH_FAILED"

    lifecycle.resume(mine.pk)  # and the genuine approval still sends, once
    assert sent() == [{**MAIL, "verdict": "verified"}]
