"""WebAuthn assertions with py_webauthn: parsing, verification with a reason code for every
refusal, and the §7.3.1 `mcplet_auth` payload. Stateless: challenges live in `challenges`,
credentials and ceremonies in `models`."""

from webauthn import verify_authentication_response
from webauthn.helpers import (
    base64url_to_bytes,
    bytes_to_base64url,
    parse_authentication_credential_json,
    parse_client_data_json,
)
from webauthn.helpers.exceptions import InvalidAuthenticationResponse, WebAuthnException

# Refusal reasons: stable codes for the page, the audit trail and verify-assertion's answer.
MALFORMED = "malformed"
UNAUTHENTICATED = "unauthenticated"
UNKNOWN_CHALLENGE = "unknown_challenge"
EXPIRED = "expired"
ALREADY_USED = "already_used"
UNKNOWN_CEREMONY = "unknown_ceremony"
WRONG_CEREMONY = "wrong_ceremony"
WRONG_CALL = "wrong_call"
WRONG_SERVER = "wrong_server"
WRONG_USER = "wrong_user"
WRONG_ORIGIN = "wrong_origin"
WRONG_RP_ID = "wrong_rp_id"
REPLAYED = "replayed"
USER_NOT_VERIFIED = "user_not_verified"
BAD_SIGNATURE = "bad_signature"
UNKNOWN_CREDENTIAL = "unknown_credential"
NO_PASSKEY = "no_passkey"
NOT_AN_APPROVER = "not_an_approver"
NOT_PENDING = "not_pending"
NOT_APPROVED = "not_approved"
LOOPBACK_ONLY = "loopback_only"
NOT_OUTCOME_UNKNOWN = "not_outcome_unknown"
RERUN_OPEN = "rerun_open"

# py_webauthn raises one exception type; its messages tell the failed check apart.
_REASONS = (
    ("Unexpected client data origin", WRONG_ORIGIN),
    ("Unexpected RP ID hash", WRONG_RP_ID),
    ("Client data challenge was not expected", WRONG_CALL),
    ("Response sign count", REPLAYED),
    ("User verification is required", USER_NOT_VERIFIED),
)


class Refused(Exception):
    """A passkey step was refused: `reason` is one of the codes above, `status` the HTTP
    status a view answers with."""

    def __init__(self, reason, message, status=400):
        super().__init__(message)
        self.reason, self.message, self.status = reason, message, status


def parse(credential_json):
    """The browser's `credential.toJSON()` as py_webauthn's AuthenticationCredential."""
    try:
        credential = parse_authentication_credential_json(credential_json)
        client_data = parse_client_data_json(credential.response.client_data_json)
    except (WebAuthnException, ValueError, TypeError) as exc:
        raise Refused(MALFORMED, "This is not a WebAuthn assertion.") from exc
    if client_data.type != "webauthn.get":
        raise Refused(MALFORMED, "This is not a WebAuthn assertion.")
    return credential, client_data


def verify(credential, *, challenge, origin, rp_id, public_key, sign_count, require_uv):
    """Check origin, rpId, challenge, flags, sign count and signature; the new sign count."""
    try:
        verified = verify_authentication_response(
            credential=credential,
            expected_challenge=challenge,
            expected_origin=origin,
            expected_rp_id=rp_id,
            credential_public_key=public_key,
            credential_current_sign_count=sign_count,
            require_user_verification=require_uv,
        )
    except InvalidAuthenticationResponse as exc:
        text = str(exc)
        reason = next((code for prefix, code in _REASONS if text.startswith(prefix)), None)
        raise Refused(reason or BAD_SIGNATURE, _MESSAGES.get(reason, _BAD), 403) from exc
    except (WebAuthnException, ValueError) as exc:  # e.g. an unparseable public key
        raise Refused(BAD_SIGNATURE, _BAD, 403) from exc
    return verified.new_sign_count


_BAD = "The passkey's signature does not verify."
_MESSAGES = {
    WRONG_ORIGIN: "The assertion was made on another origin than this page's.",
    WRONG_RP_ID: "The assertion was made for another relying party.",
    WRONG_CALL: "The assertion was made for another challenge.",
    REPLAYED: "The authenticator's counter did not advance: a replayed assertion.",
    USER_NOT_VERIFIED: "The authenticator did not verify the user (PIN or biometrics).",
}


def mcplet_auth(credential, challenge):
    """The §7.3.1 payload the host injects into `params._meta.mcplet_auth` (base64url strings),
    plus `credentialId` so the backend names the key it asks about."""
    response = credential.response
    return {
        "type": "passkey_assertion",
        "challenge": bytes_to_base64url(challenge),
        "clientDataJSON": bytes_to_base64url(response.client_data_json),
        "authenticatorData": bytes_to_base64url(response.authenticator_data),
        "signature": bytes_to_base64url(response.signature),
        "userHandle": bytes_to_base64url(response.user_handle) if response.user_handle else None,
        "credentialId": credential.id,
    }


def from_mcplet_auth(auth):
    """Rebuild the credential (and its client data) from a backend's `mcplet_auth` payload."""
    if not isinstance(auth, dict) or auth.get("type") != "passkey_assertion":
        raise Refused(MALFORMED, "mcplet_auth is not a passkey_assertion.")
    fields = ("credentialId", "clientDataJSON", "authenticatorData", "signature")
    if not all(isinstance(auth.get(f), str) and auth[f] for f in fields):
        raise Refused(MALFORMED, "mcplet_auth lacks " + ", ".join(fields) + ".")
    response = {
        "clientDataJSON": auth["clientDataJSON"],
        "authenticatorData": auth["authenticatorData"],
        "signature": auth["signature"],
    }
    if isinstance(auth.get("userHandle"), str):
        response["userHandle"] = auth["userHandle"]
    credential, client_data = parse(
        {
            "id": auth["credentialId"],
            "rawId": auth["credentialId"],
            "type": "public-key",
            "response": response,
        }
    )
    if auth.get("challenge") not in (None, bytes_to_base64url(client_data.challenge)):
        raise Refused(
            WRONG_CALL, "mcplet_auth.challenge is not the challenge that was signed.", 403
        )
    return credential, client_data


def b64decode(value):
    try:
        return base64url_to_bytes(value)
    except (ValueError, TypeError) as exc:
        raise Refused(MALFORMED, "Not base64url.") from exc
