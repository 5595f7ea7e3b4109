import hashlib
import hmac
import json
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.cache import cache
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.crypto import salted_hmac
from webauthn import generate_registration_options, options_to_json, verify_registration_response
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    AuthenticatorTransport,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from held.models import APPROVE_PERMISSION
from mcplet_host import audit, kept
from passkey import assertions
from passkey.assertions import Refused
from passkey.challenges import CHALLENGE_TTL

REFUSED_EVENT = "mcplet.passkey.refused"


def require_user_verification():
    """Passkeys verify the person (PIN, biometrics), not only their presence."""
    return getattr(settings, "PASSKEY_REQUIRE_USER_VERIFICATION", True)


def audit_refusal(stage, refusal, *, ceremony=None, user=None, server=None, tool=""):
    """Every refused passkey step is an audit event: who tried what, and why — never the
    assertion itself."""
    if user is not None:
        actor = {"actor_type": audit.ActorType.USER, "actor_id": user.get_username()}
    else:
        name = f"server:{server.name}" if server is not None else ""
        actor = {"actor_type": audit.ActorType.SYSTEM, "actor_id": name}
    details = {"stage": stage, "reason": refusal.reason}
    if ceremony is not None:
        details |= {"ceremony": ceremony.token[:8], "agent": ceremony.agent_id}
        details |= ceremony.authority.audit_details()
    audit.record(
        REFUSED_EVENT,
        **actor,
        target_server=ceremony.server_name if ceremony else getattr(server, "name", ""),
        target_tool=ceremony.tool_name if ceremony else str(tool)[:200],
        result=audit.BLOCKED,
        trace_id=ceremony.trace_id if ceremony else "",
        details=details,
    )


class PasskeyCredentialQuerySet(models.QuerySet):
    def active(self):
        return self.filter(**PasskeyCredential.ACTIVE)


class PasskeyCredential(models.Model):
    """One registered passkey of an approver. A user may hold several; revoked ones stay listed
    (who approved what with which key remains readable) but never verify again."""

    ACTIVE = {"revoked_at__isnull": True, "user__is_active": True}  # not revoked, owner active

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="passkeys"
    )
    name = models.CharField(max_length=100, help_text="Which key this is, e.g. 'work laptop'.")
    credential_id = models.CharField(max_length=1400, unique=True, editable=False)  # base64url
    public_key = models.BinaryField(editable=False)  # COSE, as registered
    sign_count = models.PositiveBigIntegerField(default=0, editable=False)
    transports = models.JSONField(default=list, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = PasskeyCredentialQuerySet.as_manager()

    class Meta:
        ordering = ["user", "-created_at"]
        verbose_name = "passkey"

    def __str__(self):
        return f"{self.name} ({self.user.get_username()})"

    @staticmethod
    def user_handle(user):
        """The WebAuthn user.id: stable per user and opaque (no name or e-mail in it)."""
        return salted_hmac("passkey.user-handle", str(user.pk), algorithm="sha256").digest()

    @classmethod
    def registration_options(cls, user):
        """Creation options for one more passkey of `user`; the challenge waits in the cache."""
        check_approver(user)
        challenge = secrets.token_bytes(32)
        cache.set(_registration_key(user), challenge, CHALLENGE_TTL)
        verification = (
            UserVerificationRequirement.REQUIRED
            if require_user_verification()
            else UserVerificationRequirement.PREFERRED
        )
        options = generate_registration_options(
            rp_id=settings.PASSKEY_RP_ID,
            rp_name=settings.PASSKEY_RP_NAME,
            user_id=cls.user_handle(user),
            user_name=user.get_username(),
            user_display_name=user.get_full_name() or user.get_username(),
            challenge=challenge,
            timeout=CHALLENGE_TTL * 1000,
            authenticator_selection=AuthenticatorSelectionCriteria(
                resident_key=ResidentKeyRequirement.PREFERRED, user_verification=verification
            ),
            exclude_credentials=[c.descriptor() for c in cls.objects.active().filter(user=user)],
        )
        return json.loads(options_to_json(options))

    @classmethod
    def register(cls, user, name, credential_json, origin):
        """Verify a new passkey (`credential.toJSON()` of navigator.credentials.create) and keep
        it. Registering approves nothing (§7.2 Phase 3); a refusal is audited."""
        try:
            return cls._verified(user, name, credential_json, origin)
        except Refused as refusal:
            audit_refusal("register", refusal, user=user)
            raise

    @classmethod
    def _verified(cls, user, name, credential_json, origin):
        check_approver(user)
        if not isinstance(credential_json, dict) or not isinstance(name, str):
            raise Refused(assertions.MALFORMED, "This is not a passkey registration.")
        key = _registration_key(user)
        challenge = cache.get(key)
        if challenge is None or not cache.delete(key):  # the delete decides who used it
            raise Refused(assertions.UNKNOWN_CHALLENGE, "The registration expired; try again.")
        try:
            verified = verify_registration_response(
                credential=credential_json,
                expected_challenge=challenge,
                expected_origin=origin,
                expected_rp_id=settings.PASSKEY_RP_ID,
                require_user_verification=require_user_verification(),
            )
        except (WebAuthnException, ValueError, TypeError) as exc:
            raise Refused(assertions.BAD_SIGNATURE, f"The passkey was not accepted: {exc}") from exc
        response = credential_json.get("response")
        transports = (response or {}).get("transports") or []
        credential_id = bytes_to_base64url(verified.credential_id)
        if cls.objects.filter(credential_id=credential_id).exists():
            raise Refused(assertions.MALFORMED, "This passkey is already registered.", 409)
        passkey = cls.objects.create(
            user=user,
            name=name.strip()[:100] or f"Passkey {timezone.now():%Y-%m-%d %H:%M}",
            credential_id=credential_id,
            public_key=verified.credential_public_key,
            sign_count=verified.sign_count,
            transports=[t for t in transports if isinstance(t, str)][:8],
        )
        audit.record(
            "mcplet.passkey.registered",
            actor_type=audit.ActorType.USER,
            actor_id=user.get_username(),
            details={"passkey": passkey.name, "credential": credential_id[:12]},
        )
        return passkey

    @property
    def is_active(self):
        return self.revoked_at is None

    @property
    def state(self):
        return "active" if self.is_active else "revoked"

    def descriptor(self):
        transports = []
        for name in self.transports:
            try:
                transports.append(AuthenticatorTransport(name))
            except ValueError:
                continue  # a transport this py_webauthn does not know: only a hint anyway
        return PublicKeyCredentialDescriptor(
            id=base64url_to_bytes(self.credential_id), transports=transports or None
        )

    def verify(self, credential, *, challenge, origin):
        """Verify an assertion made with this passkey and advance its sign count, once: of two
        assertions racing with one count, only one gets through."""
        count = assertions.verify(
            credential,
            challenge=challenge,
            origin=origin,
            rp_id=settings.PASSKEY_RP_ID,
            public_key=bytes(self.public_key),
            sign_count=self.sign_count,
            require_uv=require_user_verification(),
        )
        moved = kept.update(
            PasskeyCredential,
            {"pk": self.pk, "sign_count": self.sign_count},
            {"sign_count": count, "last_used_at": timezone.now()},
        )
        if not moved:
            raise Refused(assertions.REPLAYED, "This assertion was already used.", 403)
        self.sign_count = count
        return count

    def revoke(self, by=None):
        if self.revoked_at is not None:
            return False
        self.revoked_at = timezone.now()
        self.save(update_fields=["revoked_at"])
        audit.record(
            "mcplet.passkey.revoked",
            actor_type=audit.ActorType.USER if by else audit.ActorType.SYSTEM,
            actor_id=by.get_username() if by else "",
            details={"passkey": self.name, "owner": self.user.get_username()},
        )
        return True


def _registration_key(user):
    return f"passkey:registration:{user.pk}"


def approver_permission():
    app_label, codename = APPROVE_PERMISSION.split(".")
    return Permission.objects.filter(codename=codename, content_type__app_label=app_label)


def approvers():
    """Active users who may approve: directly, through a group, or as superusers."""
    perm = approver_permission()
    holds = Q(is_superuser=True) | Q(user_permissions__in=perm) | Q(groups__permissions__in=perm)
    return get_user_model().objects.filter(holds, is_active=True).distinct()


def may_approve(user):
    return approvers().filter(pk=user.pk).exists()


def group_may_approve(group):
    return group.permissions.filter(pk__in=approver_permission()).exists()


def check_approver(user):
    """Raise Refused unless `user` may approve held calls."""
    if not (user.is_active and user.has_perm(APPROVE_PERMISSION)):
        raise Refused(assertions.NOT_AN_APPROVER, "Only approvers hold passkeys here.", 403)


VERIFY_KEY_PREFIX = "mcpv_"


def hash_token(raw):
    # Tokens carry 256 bits of randomness, so a fast hash is enough (no password stretching).
    return hashlib.sha256(raw.encode()).hexdigest()


class BackendToken(models.Model):
    """How an MCP server authenticates to `POST /auth/verify-assertion` (§7.1.2). Only its
    SHA-256 is stored; the token is shown once, at creation."""

    server = models.ForeignKey(
        "pools.McpServer", on_delete=models.CASCADE, related_name="verify_tokens"
    )
    name = models.CharField(max_length=100, blank=True, help_text="Where it is deployed.")
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    token_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "verify-assertion token"

    def __str__(self):
        return f"{self.prefix}… ({self.server.name})"

    @classmethod
    def issue(cls, server, name=""):
        """A token for `server`; returns (BackendToken, raw token). The raw token is not kept."""
        raw = VERIFY_KEY_PREFIX + secrets.token_urlsafe(32)
        prefix = raw[: len(VERIFY_KEY_PREFIX) + 8]
        token = cls.objects.create(
            server=server, name=name, prefix=prefix, token_hash=hash_token(raw)
        )
        return token, raw

    @classmethod
    def authenticate(cls, raw):
        """The live token matching `raw`, or None."""
        if not raw or not raw.startswith(VERIFY_KEY_PREFIX):
            return None
        token = (
            cls.objects.select_related("server")
            .filter(prefix=raw[: len(VERIFY_KEY_PREFIX) + 8], revoked_at__isnull=True)
            .first()
        )
        if token is None or not hmac.compare_digest(token.token_hash, hash_token(raw)):
            return None
        cls.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
        return token

    @property
    def state(self):
        return "active" if self.revoked_at is None else "revoked"

    def revoke(self):
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])
