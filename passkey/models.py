import hashlib
import json
import secrets
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import models, transaction
from django.utils import timezone

from mcplet_host import audit
from mcplet_host.celery import enqueue

RESUME_TASK = "mcplet_host.resume_call"
ASSERTION_CACHE_TTL = 120  # seconds an assertion may wait in the cache for its injection


def arguments_hash(tool_name, arguments):
    """SHA-256 of the exact call: what an approval (and its challenge) is bound to."""
    canonical = json.dumps(
        {"tool": tool_name, "arguments": arguments}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


class CeremonyQuerySet(models.QuerySet):
    def pending(self):
        return self.filter(status=Ceremony.Status.PENDING)

    def overdue(self):
        return self.pending().filter(expires_at__lte=timezone.now())


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

    class Enforcement(models.TextChoices):
        STRICT = "strict", "strict (the MCPlet verifies the passkey assertion)"
        HOST_ONLY = "host-only", "host-only (the host's confirmation is enough)"

    class Kind(models.TextChoices):
        TOOL_CALL = "tool_call", "a tool call"
        RESULT = "result", "an agent's result (e.g. a plan) before its hand-off"

    FINAL = (Status.EXECUTED, Status.REJECTED, Status.EXPIRED, Status.FAILED)
    DECLINED = {
        Status.REJECTED: ("X_APPROVAL_REJECTED", "The approver rejected this; nothing ran."),
        Status.EXPIRED: ("X_APPROVAL_EXPIRED", "Nobody approved this in time; nothing ran."),
    }

    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.TOOL_CALL)
    token = models.CharField(max_length=64, unique=True, editable=False)
    nonce = models.CharField(max_length=64, editable=False)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    # Who asks: ids, not foreign keys, because the passkey room does not depend on agents.
    agent_id = models.CharField(max_length=100)
    partner_id = models.CharField(max_length=100, blank=True)
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

    objects = CeremonyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        permissions = [("approve_ceremony", "Can approve or reject tool calls with a passkey")]

    def __str__(self):
        return f"{self.tool_name} for {self.agent_id} ({self.status})"

    @classmethod
    def open(
        cls,
        *,
        mcplet,
        arguments,
        agent_id,
        partner_id="",
        trace_id="",
        surface="model",
        continuation="",
        continuation_ref="",
    ):
        return cls.objects.create(
            token=secrets.token_urlsafe(24),
            nonce=secrets.token_hex(32),
            agent_id=agent_id,
            partner_id=partner_id,
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
    def open_for_result(
        cls, *, agent_id, result, prompt_message, trace_id="", continuation="", continuation_ref=""
    ):
        """Hold an agent's result for a person's confirmation (host-only: no tool runs)."""
        name = f"approve result of {agent_id}"
        return cls.objects.create(
            kind=cls.Kind.RESULT,
            token=secrets.token_urlsafe(24),
            nonce=secrets.token_hex(32),
            agent_id=agent_id,
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
    def is_overdue(self):
        return self.status == self.Status.PENDING and self.expires_at <= timezone.now()

    @property
    def assertion_key(self):
        return f"ceremony:{self.pk}:assertion"

    def approve(self, user, assertion=None):
        """Record the approval and schedule the call. False if it is no longer pending."""
        with transaction.atomic():
            ceremony = Ceremony.objects.select_for_update().get(pk=self.pk)
            if ceremony.status != self.Status.PENDING or ceremony.is_overdue:
                return False
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
        and its continuation told."""
        if self.kind == self.Kind.TOOL_CALL:
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
        code, message = self.DECLINED[self.status]
        return {"error": {"code": code, "message": message}}

    def notify_continuation(self):
        if self.continuation:
            task, args = self.continuation, [self.pk, self.continuation_ref]
            transaction.on_commit(lambda: enqueue(task, args))

    def _audit(self, event_type, result):
        """Who decided what, and when — never the assertion itself."""
        user = self.decided_by
        audit.record(
            event_type,
            actor_type=audit.ActorType.USER if user else audit.ActorType.SYSTEM,
            actor_id=user.get_username() if user else "",
            target_server=self.server_name,
            target_tool=self.tool_name,
            result=result,
            trace_id=self.trace_id,
            details={
                "ceremony": self.token[:8],
                "status": self.status,
                "agent": self.agent_id,
                "arguments_hash": self.arguments_hash,
            },
        )

    def take_assertion(self):
        """The assertion, removed from the cache: it is injected once and never kept."""
        assertion = cache.get(self.assertion_key)
        cache.delete(self.assertion_key)
        return assertion
