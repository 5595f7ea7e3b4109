"""Issued WebAuthn challenges: in the cache only (never the database), short-lived, single-use,
and each bound to exactly one tool call (DESIGN.md, "Call-bound challenges")."""

import hashlib
import hmac
import secrets
import time
from dataclasses import asdict, dataclass
from typing import ClassVar

from django.core.cache import cache
from webauthn.helpers import bytes_to_base64url

CHALLENGE_TTL = 45  # seconds the approver has to sign; §3.7 wants < 60
GRACE = 10  # a record outlives its validity (still < 60 s), so "expired" differs from "unknown"
CLAIM_TTL = 3600  # a used challenge stays used for longer than any record can live


def call_challenge(nonce, arguments_hash, salt):
    """sha256(nonce || arguments hash || salt): the challenge names the exact call it approves,
    and the per-issue salt makes every challenge new."""
    return hashlib.sha256(b"|".join((nonce.encode(), arguments_hash.encode(), salt))).digest()


@dataclass
class ChallengeRecord:
    """What the host remembers about one issued challenge, keyed by the challenge itself."""

    ISSUED: ClassVar[str] = "issued"
    APPROVED: ClassVar[str] = "approved"

    challenge: str  # base64url
    ceremony_id: int
    user_id: int
    salt: str  # hex; with the ceremony's nonce and the call's hash it re-derives the challenge
    expires: float  # epoch seconds
    state: str = ISSUED
    origin: str = ""  # set once approved: the page origin the assertion was verified for
    credential_id: str = ""
    sign_count: int = 0

    @classmethod
    def issue(cls, ceremony, user, ttl):
        salt = secrets.token_bytes(16)
        challenge = call_challenge(ceremony.nonce, ceremony.arguments_hash, salt)
        record = cls(
            challenge=bytes_to_base64url(challenge),
            ceremony_id=ceremony.pk,
            user_id=user.pk,
            salt=salt.hex(),
            expires=time.time() + ttl,
        )
        record.save()
        return record, challenge

    @classmethod
    def find(cls, challenge):
        data = cache.get(cls._key(bytes_to_base64url(challenge)))
        return cls(**data) if data else None

    @staticmethod
    def _key(challenge):
        return f"passkey:challenge:{challenge}"

    @property
    def key(self):
        return self._key(self.challenge)

    @property
    def expired(self):
        return time.time() >= self.expires

    def save(self):
        cache.set(self.key, asdict(self), max(1, int(self.expires - time.time())) + GRACE)

    def binds(self, nonce, arguments_hash, challenge):
        """Whether `challenge` is this record's derivation for the call with `arguments_hash`."""
        expected = call_challenge(nonce, arguments_hash, bytes.fromhex(self.salt))
        return hmac.compare_digest(expected, challenge)

    def claim(self, stage):
        """Use the challenge once at `stage` ("callback", "verify"): only the first caller wins,
        across processes (an atomic add in the shared cache)."""
        return cache.add(f"{self.key}:{stage}", 1, CLAIM_TTL)
