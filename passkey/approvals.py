"""Approving a held call with a passkey (§3.7, §7.2, §7.3): the WebAuthn challenge bound to
exactly one call, the approver's assertion verified at the callback, and the MCPlet's
`POST /auth/verify-assertion` (§7.1.2). Everything that decides is here; the views stay thin."""

import json
import time

from django.conf import settings
from django.core.cache import cache
from webauthn import generate_authentication_options, options_to_json
from webauthn.helpers.structs import UserVerificationRequirement

from held.models import ASSERTION_CACHE_TTL, Ceremony, arguments_hash
from mcplet_host import audit, kept
from passkey import assertions
from passkey.assertions import Refused
from passkey.challenges import CHALLENGE_TTL, ChallengeRecord
from passkey.models import (
    PasskeyCredential,
    audit_refusal,
    check_approver,
    require_user_verification,
)


def issue_challenge(ceremony, user):
    """WebAuthn request options for `user` to approve this call: a fresh challenge derived
    from the call, alive < 60 s, usable once, kept in the cache only."""
    try:
        check_approver(user)
        ceremony.check_open()
        passkeys = kept.rows(PasskeyCredential, **PasskeyCredential.ACTIVE, user=user)
        if not passkeys:
            raise Refused(assertions.NO_PASSKEY, "Register a passkey first.", 409)
    except Refused as refusal:
        audit_refusal("challenge", refusal, ceremony=ceremony, user=user)
        raise
    ttl = max(1, min(CHALLENGE_TTL, ceremony.seconds_left))
    _, challenge = ChallengeRecord.issue(ceremony, user, ttl)
    options = generate_authentication_options(
        rp_id=settings.PASSKEY_RP_ID,
        challenge=challenge,
        timeout=ttl * 1000,
        allow_credentials=[p.descriptor() for p in passkeys],
        user_verification=UserVerificationRequirement.REQUIRED
        if require_user_verification()
        else UserVerificationRequirement.PREFERRED,
    )
    return json.loads(options_to_json(options))


def approve_with_passkey(ceremony, user, credential_json, origin):
    """The callback: verify `user`'s assertion (`credential.toJSON()`) for this very call
    on the page `origin`, then approve. A strict call gets the §7.3.1 payload injected; the
    assertion goes to the cache, never the database. Raises Refused (audited)."""
    try:
        _approve_with_passkey(ceremony, user, credential_json, origin)
    except Refused as refusal:
        audit_refusal("callback", refusal, ceremony=ceremony, user=user)
        raise


def _approve_with_passkey(ceremony, user, credential_json, origin):
    check_approver(user)
    credential, client_data = assertions.parse(credential_json)
    challenge = client_data.challenge
    record = ChallengeRecord.find(challenge)
    if record is None:
        raise Refused(assertions.UNKNOWN_CHALLENGE, "This challenge was never issued.", 403)
    if record.ceremony_id != ceremony.pk:
        raise Refused(assertions.WRONG_CEREMONY, "This assertion is for another call.", 403)
    if record.user_id != user.pk:
        raise Refused(assertions.WRONG_USER, "This challenge was issued to someone else.", 403)
    if record.state != record.ISSUED or not record.claim("callback"):
        raise Refused(assertions.ALREADY_USED, "This challenge was already used.", 403)
    if record.expired:
        raise Refused(assertions.EXPIRED, "The challenge expired; approve again.", 403)
    ceremony.check_open()
    if not record.binds(ceremony.nonce, ceremony.arguments_hash, challenge):
        raise Refused(assertions.WRONG_CALL, "The challenge is not bound to this call.", 403)
    try:
        passkey = kept.get(
            PasskeyCredential, **PasskeyCredential.ACTIVE, user=user, credential_id=credential.id
        )
    except PasskeyCredential.DoesNotExist:
        raise Refused(
            assertions.UNKNOWN_CREDENTIAL, "This passkey is not registered.", 403
        ) from None
    count = passkey.verify(credential, challenge=challenge, origin=origin)
    # Recorded before approve(): an eager resume may ask verify-assertion at once.
    record.state, record.origin = record.APPROVED, origin
    record.credential_id, record.sign_count = passkey.credential_id, count
    record.expires = time.time() + ASSERTION_CACHE_TTL + settings.MCPLET_TOOL_TIMEOUT
    record.save()
    payload = assertions.mcplet_auth(credential, challenge) if ceremony.needs_assertion else None
    if not ceremony.approve(user, assertion=payload):
        cache.delete(record.key)
        raise Refused(assertions.NOT_PENDING, "This call was decided meanwhile.", 410)


def verify_for_backend(server, mcplet_auth, tool, arguments):
    """`POST /auth/verify-assertion` (§7.1.2, §7.2 Phase 6): does `mcplet_auth` authorise
    exactly this call of `tool` with `arguments` on `server`? Returns the ceremony, once per
    assertion; raises Refused (audited)."""
    ceremony = None
    try:
        credential, client_data = assertions.from_mcplet_auth(mcplet_auth)
        record = ChallengeRecord.find(client_data.challenge)
        if record is not None:
            ceremony = Ceremony.objects.filter(pk=record.ceremony_id).first()
        if ceremony is None:
            raise Refused(assertions.UNKNOWN_CHALLENGE, "This challenge is unknown.", 200)
        _verify_for_backend(ceremony, server, record, credential, client_data, tool, arguments)
    except Refused as refusal:
        audit_refusal("verify", refusal, ceremony=ceremony, server=server, tool=tool)
        raise
    ceremony.audit_event(
        "mcplet.passkey.verified",
        audit.SUCCESS,
        {"approved_by": getattr(ceremony.decided_by, "username", "")},
        system=f"server:{server.name}",
    )
    return ceremony


def _verify_for_backend(ceremony, server, record, credential, client_data, tool, arguments):
    if cache.get(f"{record.key}:verify") is not None:
        raise Refused(assertions.ALREADY_USED, "This assertion was already verified.", 200)
    if record.state != record.APPROVED:
        raise Refused(assertions.NOT_APPROVED, "Nobody approved with this challenge.", 200)
    if record.expired:
        raise Refused(assertions.EXPIRED, "The approval's verification window passed.", 200)
    if ceremony.status not in (Ceremony.Status.APPROVED, Ceremony.Status.EXECUTING):
        raise Refused(assertions.NOT_APPROVED, f"The call is {ceremony.status}.", 200)
    if ceremony.mcplet_id:
        same_server = ceremony.mcplet.server_id == server.pk
    else:
        same_server = ceremony.server_name == server.name
    if not same_server:
        raise Refused(assertions.WRONG_SERVER, "This call goes to another server.", 200)
    same_call = tool == ceremony.tool_name and record.binds(
        ceremony.nonce, arguments_hash(tool, arguments), client_data.challenge
    )
    if not same_call:
        raise Refused(assertions.WRONG_CALL, "The approval was for another call.", 200)
    passkey = PasskeyCredential.objects.active().filter(credential_id=credential.id).first()
    if passkey is None or credential.id != record.credential_id:
        raise Refused(assertions.UNKNOWN_CREDENTIAL, "This passkey is not registered.", 200)
    # The host's callback already advanced the count: this one re-verification of the same
    # assertion may show an equal count, never an older one.
    assertions.verify(
        credential,
        challenge=client_data.challenge,
        origin=record.origin,
        rp_id=settings.PASSKEY_RP_ID,
        public_key=bytes(passkey.public_key),
        sign_count=max(record.sign_count - 1, 0),
        require_uv=require_user_verification(),
    )
    if not record.claim("verify"):
        raise Refused(assertions.ALREADY_USED, "This assertion was already verified.", 200)
