import hashlib
import hmac
import json
import math
import secrets
import time
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import models, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone
from django.utils.crypto import salted_hmac
from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    options_to_json,
    verify_registration_response,
)
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    AuthenticatorTransport,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from mcplet_host import audit
from mcplet_host.authority import HOST, Authority
from mcplet_host.celery import enqueue
from passkey import assertions
from passkey.assertions import Refused
from passkey.challenges import CHALLENGE_TTL, ChallengeRecord

RESUME_TASK = "mcplet_host.resume_call"
ASSERTION_CACHE_TTL = 120  # seconds an assertion may wait in the cache for its injection
APPROVE_PERMISSION = "passkey.approve_ceremony"
REFUSED_EVENT = "mcplet.passkey.refused"


def arguments_hash(tool_name, arguments):
    """SHA-256 of the exact call: what an approval (and its challenge) is bound to."""
    canonical = json.dumps(
        {"tool": tool_name, "arguments": arguments}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


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
        return self.filter(revoked_at__isnull=True, user__is_active=True)


class PasskeyCredential(models.Model):
    """One registered passkey of an approver. A user may hold several; revoked ones stay listed
    (who approved what with which key remains readable) but never verify again."""

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
        _check_approver(user)
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
        it. Registering approves nothing (§7.2 Phase 3)."""
        _check_approver(user)
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
        response = credential_json.get("response") if isinstance(credential_json, dict) else {}
        transports = (response or {}).get("transports") or []
        credential_id = bytes_to_base64url(verified.credential_id)
        if cls.objects.filter(credential_id=credential_id).exists():
            raise Refused(assertions.MALFORMED, "This passkey is already registered.", 409)
        passkey = cls.objects.create(
            user=user,
            name=(name or "").strip()[:100] or f"Passkey {timezone.now():%Y-%m-%d %H:%M}",
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
        moved = PasskeyCredential.objects.filter(pk=self.pk, sign_count=self.sign_count).update(
            sign_count=count, last_used_at=timezone.now()
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


def _check_approver(user):
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


class CeremonyQuerySet(models.QuerySet):
    def pending(self):
        return self.filter(status=Ceremony.Status.PENDING)

    def overdue(self):
        return self.pending().filter(expires_at__lte=timezone.now())

    def stranded(self, since):
        """Tool calls decided before `since` that the gateway has not taken up (their task
        was lost): approved and not running, or declined without their error."""
        declined = Q(status__in=Ceremony.DECLINED, result__isnull=True)
        return self.filter(kind=Ceremony.Kind.TOOL_CALL, decided_at__lt=since).filter(
            Q(status=Ceremony.Status.APPROVED) | declined
        )

    def abandoned(self, since):
        """Calls sent before `since` and never settled: the worker running them died."""
        return self.filter(status=Ceremony.Status.EXECUTING, executed_at__lt=since)


class Ceremony(models.Model):
    """One side-effecting tool call held until a person approves it (spec §4, §7.2, App. A).

    The call waits here, not in a worker: the run that asked is saved and the worker freed. On
    approval a Celery task executes the call exactly once and hands the result envelope to the
    `continuation` task. A strict tool's assertion is kept in the cache only until injection.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "waiting for approval"
        APPROVED = "approved", "approved, about to run"
        EXECUTING = "executing"
        EXECUTED = "executed"
        REJECTED = "rejected"
        EXPIRED = "expired"
        FAILED = "failed"
        # Sent, and then no answer (a timeout, a lost connection): it may have run. Never
        # retried by the host; a person checks, and a re-run reuses this call's idempotency key.
        OUTCOME_UNKNOWN = "outcome_unknown", "outcome unknown"

    class Enforcement(models.TextChoices):
        STRICT = "strict", "strict (the MCPlet verifies the passkey assertion)"
        HOST_ONLY = "host-only", "host-only (the host's confirmation is enough)"

    class Kind(models.TextChoices):
        TOOL_CALL = "tool_call", "a tool call"
        RESULT = "result", "an agent's result (e.g. a plan) before its hand-off"
        # A call its server answered with a step-up (MCP URL mode, PWMA -32042): a person
        # completes it on the server's side, then the host sends the same call again, once.
        STEP_UP = "step_up", "a tool call waiting for a person's step on the server's side"
        # A server's `elicitation/create` (form mode) during a call: the worker running the call
        # waits (MCPLET_ELICITATION_WAIT) for a person's answer; no task runs on a decision.
        FORM = "form", "a form a server asks a person to fill in during a call"

    FINAL = (
        Status.EXECUTED,
        Status.REJECTED,
        Status.EXPIRED,
        Status.FAILED,
        Status.OUTCOME_UNKNOWN,
    )
    DECLINED = {
        Status.REJECTED: ("X_APPROVAL_REJECTED", "The approver rejected this; nothing ran."),
        Status.EXPIRED: ("X_APPROVAL_EXPIRED", "Nobody approved this in time; nothing ran."),
    }
    # A step-up's first call did run (and asked for the step): nothing *more* ran.
    STEP_DECLINED = {
        Status.REJECTED: "The step was cancelled; the call was not sent again.",
        Status.EXPIRED: "Nobody finished the step in time; the call was not sent again.",
    }

    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.TOOL_CALL)
    token = models.CharField(max_length=64, unique=True, editable=False)
    nonce = models.CharField(max_length=64, editable=False)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    # Who asks: ids, not foreign keys, because the passkey room does not depend on agents.
    agent_id = models.CharField(max_length=100)
    provenance = models.JSONField(
        default=dict,
        blank=True,
        help_text="Who the call acts for: the partner its workflow started for and the agents "
        "before the asking one (mcplet_host.authority).",
    )
    proposed_by_model = models.BooleanField(
        default=False, help_text="The asking agent's LLM proposed this call (not host code)."
    )
    trace_id = models.CharField(max_length=64, blank=True, db_index=True)
    mcplet = models.ForeignKey("pools.Mcplet", null=True, on_delete=models.SET_NULL)
    server_name = models.CharField(max_length=100, blank=True)
    tool_name = models.CharField(max_length=200)
    surface = models.CharField(max_length=8)
    arguments = models.JSONField()
    arguments_hash = models.CharField(max_length=64)
    prompt_message = models.TextField(blank=True)
    enforcement = models.CharField(max_length=16, choices=Enforcement.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    executed_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True, help_text="The §9.1 envelope of the call.")
    continuation = models.CharField(
        max_length=200, blank=True, help_text="Celery task told (with this id) once it is final."
    )
    continuation_ref = models.CharField(max_length=100, blank=True)
    elicitations = models.JSONField(
        default=list,
        blank=True,
        help_text="A step-up's steps as the server sent them (URL or QR), shown to the person.",
    )
    rerun_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="reruns",
        help_text="The first attempt, whose outcome is unknown, that a person runs again with "
        "this call (and its idempotency key).",
    )

    objects = CeremonyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        permissions = [("approve_ceremony", "Can approve or reject tool calls with a passkey")]

    def __str__(self):
        return f"{self.tool_name} for {self.agent_id} ({self.status})"

    def get_absolute_url(self):
        return reverse("passkey:ceremony", args=[self.token])

    @classmethod
    def open(
        cls,
        *,
        mcplet,
        arguments,
        agent_id,
        authority=HOST,
        proposed_by_model=False,
        trace_id="",
        surface="model",
        continuation="",
        continuation_ref="",
    ):
        return cls.objects.create(
            token=secrets.token_urlsafe(24),
            nonce=secrets.token_hex(32),
            agent_id=agent_id,
            provenance=authority.to_json(),
            proposed_by_model=proposed_by_model,
            trace_id=trace_id,
            mcplet=mcplet,
            server_name=mcplet.server.name,
            tool_name=mcplet.name,
            surface=surface,
            arguments=arguments,
            arguments_hash=arguments_hash(mcplet.name, arguments),
            prompt_message=mcplet.auth_prompt_message,
            # An action without auth is still held (§4); the host's confirmation suffices.
            enforcement=mcplet.auth_enforcement or cls.Enforcement.HOST_ONLY,
            expires_at=timezone.now() + timedelta(seconds=settings.MCPLET_APPROVAL_TTL),
            continuation=continuation,
            continuation_ref=continuation_ref,
        )

    @classmethod
    def open_step_up(
        cls, *, mcplet, arguments, message, elicitations, enforcement="host-only", **held
    ):
        """Hold a call its server asked a person to step up for (`held`: as for `open`). A
        `strict` one (an action approved with a passkey, whose assertion was used once) is not
        sent again on completion: it is held for a fresh assertion for the same call."""
        ceremony = cls.open(mcplet=mcplet, arguments=arguments, **held)
        ceremony.kind, ceremony.elicitations = cls.Kind.STEP_UP, elicitations
        ceremony.prompt_message, ceremony.enforcement = message, enforcement
        ceremony.save(update_fields=["kind", "elicitations", "prompt_message", "enforcement"])
        return ceremony

    def complete_step(self, by=None, elicitation_id=""):
        """The step is done: a person said so (`by`), or the server's
        notifications/elicitation/complete came (`elicitation_id`). The call is sent again, once.
        False if it is no longer waiting."""
        if self.kind != self.Kind.STEP_UP:
            return False
        with transaction.atomic():  # the retry is queued once both are committed
            if not self.approve(by):
                return False
            self._audit_step(by, elicitation_id)
        return True

    def _audit_step(self, by, elicitation_id):
        self.audit_event(
            "mcplet.stepup.completed",
            audit.SUCCESS,
            {
                "via": "notification" if elicitation_id else "person",
                **({"elicitationId": elicitation_id} if elicitation_id else {}),
                **self.authority.audit_details(),
            },
            by=by,
            system=f"server:{self.server_name}",
        )

    @classmethod
    def open_form(cls, *, mcplet, arguments, message, schema, **held):
        """Hold a server's form request made during the call `mcplet(arguments)` (`held`: who
        asks, as for `open`) until a person answers, at most MCPLET_ELICITATION_WAIT seconds."""
        held |= {"continuation": "", "continuation_ref": ""}  # the waiting worker reads it
        ceremony = cls.open(mcplet=mcplet, arguments=arguments, **held)
        ceremony.kind, ceremony.prompt_message = cls.Kind.FORM, message
        ceremony.elicitations = [{"mode": "form", "message": message, "requestedSchema": schema}]
        ceremony.enforcement = cls.Enforcement.HOST_ONLY
        wait = timedelta(seconds=settings.MCPLET_ELICITATION_WAIT)
        ceremony.expires_at = timezone.now() + wait
        ceremony.save(
            update_fields=["kind", "prompt_message", "elicitations", "enforcement", "expires_at"]
        )
        return ceremony

    @property
    def requested_schema(self):
        return self.elicitations[0]["requestedSchema"] if self.kind == self.Kind.FORM else None

    def answer_form(self, user, action, content=None):
        """A person's answer to a form: `accept` with the validated `content`, `decline` or
        `cancel`. False if it is no longer waiting (answered, expired)."""
        with transaction.atomic():
            ceremony = Ceremony.objects.select_for_update().get(pk=self.pk)
            if ceremony.status != self.Status.PENDING or ceremony.is_overdue:
                return False
            accepted = action == "accept"
            ceremony.status = self.Status.EXECUTED if accepted else self.Status.REJECTED
            ceremony.decided_by, ceremony.decided_at = user, timezone.now()
            ceremony.result = {"action": action, **({"content": content} if accepted else {})}
            ceremony.save(update_fields=["status", "decided_by", "decided_at", "result"])
            ceremony._audit_form(action)
        self.refresh_from_db()
        return True

    def wait_for_answer(self, poll=0.25):
        """Block until a person answers or the form expires (then it is declined, audited):
        the MCP `ElicitResult` content, e.g. {"action": "accept", "content": {...}}."""
        while timezone.now() < self.expires_at:
            self.refresh_from_db(fields=["status", "result"])
            if self.status != self.Status.PENDING:
                return self.result or {"action": "decline"}
            time.sleep(poll)
        self.decline(self.Status.EXPIRED)
        self.refresh_from_db(fields=["status", "result"])
        return self.result or {"action": "decline"}

    def _audit_form(self, action):
        user = self.decided_by
        self.audit_event(
            "mcplet.elicitation.answered" if user else "mcplet.elicitation.expired",
            audit.SUCCESS if action == "accept" else audit.BLOCKED,
            # The answer's field names, never its values (they may be personal data).
            {
                "action": action,
                "agent": self.agent_id,
                "fields": sorted((self.result or {}).get("content") or {}),
                **self.authority.audit_details(),
            },
            by=user,
        )

    @classmethod
    def elicitation_completed(cls, server_id, elicitation_id):
        """The server `server_id` says the step `elicitation_id` is done: complete the step-ups
        that wait for it (any process's session may have heard it)."""
        waiting = cls.objects.pending().filter(kind=cls.Kind.STEP_UP, mcplet__server_id=server_id)
        done = 0
        for ceremony in waiting:
            ids = {e.get("elicitationId") for e in ceremony.elicitations if isinstance(e, dict)}
            if elicitation_id in ids and ceremony.complete_step(elicitation_id=elicitation_id):
                done += 1
        return done

    @classmethod
    def open_for_result(
        cls,
        *,
        agent_id,
        result,
        prompt_message,
        authority=HOST,
        trace_id="",
        continuation="",
        continuation_ref="",
    ):
        """Hold an agent's result for a person's confirmation (host-only: no tool runs)."""
        name = f"approve result of {agent_id}"
        return cls.objects.create(
            kind=cls.Kind.RESULT,
            token=secrets.token_urlsafe(24),
            nonce=secrets.token_hex(32),
            agent_id=agent_id,
            provenance=authority.to_json(),
            proposed_by_model=True,
            trace_id=trace_id,
            tool_name=name,
            surface="app",
            arguments=result,
            arguments_hash=arguments_hash(name, result),
            prompt_message=prompt_message,
            enforcement=cls.Enforcement.HOST_ONLY,
            expires_at=timezone.now() + timedelta(seconds=settings.MCPLET_APPROVAL_TTL),
            continuation=continuation,
            continuation_ref=continuation_ref,
        )

    @property
    def is_final(self):
        return self.status in self.FINAL

    @property
    def outcome(self):
        """The state as a person names it: approved results were handed on, not executed."""
        if self.kind == self.Kind.RESULT and self.status == self.Status.EXECUTED:
            return "approved"
        return self.get_status_display()

    @property
    def authority(self):
        return Authority.from_json(self.provenance)

    @property
    def partner_id(self):
        """The partner the call acts for ("" if none), for pages and filters."""
        return self.authority.partner

    @property
    def asked_by(self):
        """E.g. "dispatch-agent's model, on behalf of acme-travel, via director → info-…"."""
        who = f"{self.agent_id}'s model" if self.proposed_by_model else self.agent_id
        chain = self.authority.describe()
        return f"{who}, {chain}" if chain else who

    @property
    def error(self):
        """The error of a decided call ({code, message}), or None."""
        error = (self.result or {}).get("error") if isinstance(self.result, dict) else None
        return error if isinstance(error, dict) else None

    @property
    def is_overdue(self):
        return self.status == self.Status.PENDING and self.expires_at <= timezone.now()

    @property
    def idempotency_key(self):
        """`_meta.idempotencyKey` of the call: a re-run sends its first attempt's, so a server
        that honours idempotency keys acts once however often a person runs it again."""
        return self.rerun_of.token if self.rerun_of_id else self.token

    @property
    def lineage(self):
        """For audit details: the first attempt this call runs again, if any."""
        return {"rerun_of": self.rerun_of.token[:8]} if self.rerun_of_id else {}

    @property
    def assertion_key(self):
        return f"ceremony:{self.pk}:assertion"

    def approve(self, user, assertion=None):
        """Record the approval and schedule the call. False if it is no longer pending."""
        with transaction.atomic():
            ceremony = Ceremony.objects.select_for_update().get(pk=self.pk)
            if ceremony.status != self.Status.PENDING or ceremony.is_overdue:
                return False
            if ceremony.kind == self.Kind.FORM:
                return False  # answered on its form, never approved into a call that runs
            if assertion is not None:
                cache.set(self.assertion_key, assertion, ASSERTION_CACHE_TTL)
            ceremony.status, ceremony.decided_by = self.Status.APPROVED, user
            ceremony.decided_at = timezone.now()
            ceremony.save(update_fields=["status", "decided_by", "decided_at"])
            ceremony._audit(audit.EventType.PERMISSION_GRANTED, audit.SUCCESS)
            ceremony._after_decision()
        self.refresh_from_db()
        return True

    def decline(self, status, user=None):
        """Reject or expire a pending ceremony; the call is resolved with an error, unexecuted."""
        with transaction.atomic():
            ceremony = Ceremony.objects.select_for_update().get(pk=self.pk)
            if ceremony.status != self.Status.PENDING:
                return False
            ceremony.status, ceremony.decided_by = status, user
            ceremony.decided_at = timezone.now()
            ceremony.save(update_fields=["status", "decided_by", "decided_at"])
            ceremony._audit(audit.EventType.PERMISSION_DENIED, audit.BLOCKED)
            ceremony._after_decision()
        self.refresh_from_db()
        return True

    def _after_decision(self):
        """A tool call goes to the gateway to run (or be refused) once; a result is settled here
        and its continuation told; a form's worker reads its answer (an expired one declines)."""
        if self.kind == self.Kind.FORM:
            self.result = {"action": "decline"}
            self.save(update_fields=["result"])
            self._audit_form("decline")
            return
        if self.kind != self.Kind.RESULT:
            transaction.on_commit(lambda: enqueue(RESUME_TASK, [self.pk]))
            return
        if self.status == self.Status.APPROVED:
            self.status, self.executed_at = self.Status.EXECUTED, timezone.now()
            self.result = {"approved": True, "approvedAt": self.decided_at.isoformat()}
        else:
            self.result = self.decline_error()
        self.save(update_fields=["status", "executed_at", "result"])
        self.notify_continuation()

    def decline_error(self):
        code, message = self.declined
        return {"error": {"code": code, "message": message}}

    @property
    def declined(self):
        """(code, message) of a rejected or expired ceremony."""
        code, message = self.DECLINED[self.status]
        if self.kind == self.Kind.STEP_UP:
            message = self.STEP_DECLINED[self.status]
        return code, message

    def notify_continuation(self):
        if self.continuation:
            task, args = self.continuation, [self.pk, self.continuation_ref]
            transaction.on_commit(lambda: enqueue(task, args))

    def audit_event(self, event_type, result, details, by=None, system=""):
        """An audit event about this held call: the person who acted (`by`) or else the part
        of the system named `system`, its tool and trace, and `details`."""
        audit.record(
            event_type,
            actor_type=audit.ActorType.USER if by else audit.ActorType.SYSTEM,
            actor_id=by.get_username() if by else system,
            target_server=self.server_name,
            target_tool=self.tool_name,
            result=result,
            trace_id=self.trace_id,
            details={"ceremony": self.token[:8], **details},
        )

    def _audit(self, event_type, result):
        """Who decided what, and when — never the assertion itself."""
        self.audit_event(
            event_type,
            result,
            {
                "status": self.status,
                "agent": self.agent_id,
                **self.authority.audit_details(),
                **self.lineage,
                "arguments_hash": self.arguments_hash,
            },
            by=self.decided_by,
        )

    def take_assertion(self):
        """The assertion, removed from the cache: it is injected once and never kept."""
        assertion = cache.get(self.assertion_key)
        cache.delete(self.assertion_key)
        return assertion

    # --- running again a call whose outcome is unknown ------------------------------------------

    def rerun_refusal(self):
        """Why a person may not run this call again now (a Refused), or None. Only an approved
        call whose outcome is unknown may be, once at a time, and never after a re-run ran."""
        first = self.rerun_of or self
        if self.kind != self.Kind.TOOL_CALL or self.status != self.Status.OUTCOME_UNKNOWN:
            return Refused(
                assertions.NOT_OUTCOME_UNKNOWN,
                f"Only a call whose outcome is unknown can be run again; this one is "
                f"{self.get_status_display()}.",
                409,
            )
        open_ = first.reruns.exclude(status__in=self.FINAL).first()
        if open_ is not None:
            return Refused(
                assertions.RERUN_OPEN,
                f"A re-run of this call is already {open_.get_status_display()}.",
                409,
            )
        if first.reruns.filter(status=self.Status.EXECUTED).exists():
            return Refused(assertions.RERUN_OPEN, "A re-run of this call already ran.", 409)
        return None

    def run_again(self, user):
        """A person's re-run: a new pending ceremony for exactly this call, linked to the first
        attempt and sending its idempotency key. It runs only once approved with a fresh passkey
        assertion, through the gateway like any held call. Never done by the host itself.
        Returns the new ceremony; raises Refused (audited)."""
        try:
            _check_approver(user)
            with transaction.atomic():
                # The first attempt's row is the lock: two "run again"s cannot both open one.
                first = Ceremony.objects.select_for_update().get(pk=self.rerun_of_id or self.pk)
                self.refresh_from_db()
                if refusal := self.rerun_refusal():
                    raise refusal
                rerun = Ceremony.objects.create(
                    token=secrets.token_urlsafe(24),
                    nonce=secrets.token_hex(32),
                    rerun_of=first,
                    expires_at=timezone.now() + timedelta(seconds=settings.MCPLET_APPROVAL_TTL),
                    **{field: getattr(self, field) for field in self.RERUN_COPIES},
                )
                rerun.audit_event(
                    "mcplet.approval.rerun_requested",
                    audit.PENDING,
                    {
                        **rerun.lineage,
                        "after": self.token[:8],
                        "agent": rerun.agent_id,
                        **rerun.authority.audit_details(),
                        "arguments_hash": rerun.arguments_hash,
                    },
                    by=user,
                )
        except Refused as refusal:
            audit_refusal("run-again", refusal, ceremony=self, user=user)
            raise
        return rerun

    # The call itself, as first held; not its continuation: the run it answered has moved on.
    RERUN_COPIES = (
        "kind",
        "agent_id",
        "provenance",
        "proposed_by_model",
        "trace_id",
        "mcplet",
        "server_name",
        "tool_name",
        "surface",
        "arguments",
        "arguments_hash",
        "prompt_message",
        "enforcement",
    )

    # --- approving with a passkey (the views stay thin: everything that decides is here) ------

    @property
    def seconds_left(self):
        # Rounded up: the page's countdown must not end before the server's expiry.
        return max(0, math.ceil((self.expires_at - timezone.now()).total_seconds()))

    @property
    def needs_assertion(self):
        """Strict tool calls carry the assertion to the MCPlet; the rest need the approval."""
        return self.kind == self.Kind.TOOL_CALL and self.enforcement == self.Enforcement.STRICT

    def check_open(self):
        if self.status != self.Status.PENDING:
            raise Refused(
                assertions.NOT_PENDING, f"This call is already {self.get_status_display()}.", 410
            )
        if self.is_overdue:
            raise Refused(assertions.EXPIRED, "This approval expired; nothing will run.", 410)

    def issue_challenge(self, user):
        """WebAuthn request options for `user` to approve this call: a fresh challenge derived
        from the call, alive < 60 s, usable once, kept in the cache only."""
        try:
            _check_approver(user)
            self.check_open()
            passkeys = list(PasskeyCredential.objects.active().filter(user=user))
            if not passkeys:
                raise Refused(assertions.NO_PASSKEY, "Register a passkey first.", 409)
        except Refused as refusal:
            audit_refusal("challenge", refusal, ceremony=self, user=user)
            raise
        ttl = max(1, min(CHALLENGE_TTL, self.seconds_left))
        _, challenge = ChallengeRecord.issue(self, user, ttl)
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

    def approve_with_passkey(self, user, credential_json, origin):
        """The callback: verify `user`'s assertion (`credential.toJSON()`) for this very call
        on the page `origin`, then approve. A strict call gets the §7.3.1 payload injected; the
        assertion goes to the cache, never the database. Raises Refused (audited)."""
        try:
            self._approve_with_passkey(user, credential_json, origin)
        except Refused as refusal:
            audit_refusal("callback", refusal, ceremony=self, user=user)
            raise

    def _approve_with_passkey(self, user, credential_json, origin):
        _check_approver(user)
        credential, client_data = assertions.parse(credential_json)
        challenge = client_data.challenge
        record = ChallengeRecord.find(challenge)
        if record is None:
            raise Refused(assertions.UNKNOWN_CHALLENGE, "This challenge was never issued.", 403)
        if record.ceremony_id != self.pk:
            raise Refused(assertions.WRONG_CEREMONY, "This assertion is for another call.", 403)
        if record.user_id != user.pk:
            raise Refused(assertions.WRONG_USER, "This challenge was issued to someone else.", 403)
        if record.state != record.ISSUED or not record.claim("callback"):
            raise Refused(assertions.ALREADY_USED, "This challenge was already used.", 403)
        if record.expired:
            raise Refused(assertions.EXPIRED, "The challenge expired; approve again.", 403)
        self.check_open()
        if not record.binds(self.nonce, self.arguments_hash, challenge):
            raise Refused(assertions.WRONG_CALL, "The challenge is not bound to this call.", 403)
        passkey = PasskeyCredential.objects.active().filter(user=user, credential_id=credential.id)
        passkey = passkey.first()
        if passkey is None:
            raise Refused(assertions.UNKNOWN_CREDENTIAL, "This passkey is not registered.", 403)
        count = passkey.verify(credential, challenge=challenge, origin=origin)
        # Recorded before approve(): an eager resume may ask verify-assertion at once.
        record.state, record.origin = record.APPROVED, origin
        record.credential_id, record.sign_count = passkey.credential_id, count
        record.expires = time.time() + ASSERTION_CACHE_TTL + settings.MCPLET_TOOL_TIMEOUT
        record.save()
        payload = assertions.mcplet_auth(credential, challenge) if self.needs_assertion else None
        if not self.approve(user, assertion=payload):
            cache.delete(record.key)
            raise Refused(assertions.NOT_PENDING, "This call was decided meanwhile.", 410)

    @classmethod
    def verify_for_backend(cls, server, mcplet_auth, tool, arguments):
        """`POST /auth/verify-assertion` (§7.1.2, §7.2 Phase 6): does `mcplet_auth` authorise
        exactly this call of `tool` with `arguments` on `server`? Returns the ceremony, once per
        assertion; raises Refused (audited)."""
        ceremony = None
        try:
            credential, client_data = assertions.from_mcplet_auth(mcplet_auth)
            record = ChallengeRecord.find(client_data.challenge)
            if record is not None:
                ceremony = cls.objects.filter(pk=record.ceremony_id).first()
            if ceremony is None:
                raise Refused(assertions.UNKNOWN_CHALLENGE, "This challenge is unknown.", 200)
            ceremony._verify_for_backend(server, record, credential, client_data, tool, arguments)
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

    def _verify_for_backend(self, server, record, credential, client_data, tool, arguments):
        if cache.get(f"{record.key}:verify") is not None:
            raise Refused(assertions.ALREADY_USED, "This assertion was already verified.", 200)
        if record.state != record.APPROVED:
            raise Refused(assertions.NOT_APPROVED, "Nobody approved with this challenge.", 200)
        if record.expired:
            raise Refused(assertions.EXPIRED, "The approval's verification window passed.", 200)
        if self.status not in (self.Status.APPROVED, self.Status.EXECUTING):
            raise Refused(assertions.NOT_APPROVED, f"The call is {self.status}.", 200)
        if self.mcplet_id:
            same_server = self.mcplet.server_id == server.pk
        else:
            same_server = self.server_name == server.name
        if not same_server:
            raise Refused(assertions.WRONG_SERVER, "This call goes to another server.", 200)
        same_call = tool == self.tool_name and record.binds(
            self.nonce, arguments_hash(tool, arguments), client_data.challenge
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
