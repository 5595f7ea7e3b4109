"""The held call's row: what is held, who asks, and a person's decision. Each kind's own rules
live in `held.kinds` (the row delegates to them through `rules`); running a decided call is
`held.lifecycle`'s."""

import hashlib
import json
import math
import secrets
from contextlib import suppress
from dataclasses import dataclass, fields, replace
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import models, transaction
from django.db.models import Exists, OuterRef, Q
from django.urls import reverse
from django.utils import timezone

from mcplet_host import audit, guarded, kept, metrics, signals, tracing
from mcplet_host.authority import HOST, Authority
from mcplet_host.celery import enqueue
from passkey.assertions import EXPIRED, NOT_PENDING, Refused
from pools.fields import SealedJSONField

APPROVE_PERMISSION = "held.approve_ceremony"
ASSERTION_CACHE_TTL = 120  # seconds an assertion may wait in the cache for its injection


def arguments_hash(tool_name, arguments):
    """SHA-256 of the exact call: what an approval (and its challenge) is bound to."""
    canonical = json.dumps(
        {"tool": tool_name, "arguments": arguments}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Asker:
    """Who asks for a held call and who waits for its end: one value, from the gateway to every
    hold of the same call (a step, a fresh approval, a form, a re-run). The agent that asks, the
    Authority it acts under, whether its LLM proposed the call, the trace, the surface, and
    the continuation (a Celery task told `(ceremony id, continuation_ref)` once it is final)."""

    agent_id: str
    authority: Authority = HOST
    proposed_by_model: bool = False
    trace_id: str = ""
    surface: str = "model"
    continuation: str = ""
    continuation_ref: str = ""

    def row(self):
        """The Ceremony fields this value fills."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "authority"}
        return values | {"provenance": self.authority.to_json()}

    def actor(self):
        """The audit event's actor: the asking agent."""
        return {"actor_type": audit.ActorType.AGENT, "actor_id": self.agent_id}

    def record(self, event_type, result, details, *, server="", tool=""):
        """An audit event of this asker's call: the agent acts, in its trace."""
        audit.record(
            event_type,
            **self.actor(),
            target_server=server,
            target_tool=tool,
            result=result,
            trace_id=self.trace_id,
            details=details,
        )

    def call_details(self):
        """The audit details of its call: for whom, through whom, on which surface, and
        whether its LLM proposed it."""
        details = {**self.authority.audit_details(), "surface": self.surface}
        if self.proposed_by_model:
            details["proposed_by"] = f"{self.agent_id}'s model"
        return details

    def nobody_waits(self):
        """The same asker with no continuation (a form's worker, a re-run: nobody is woken)."""
        return replace(self, continuation="", continuation_ref="")


class CeremonyQuerySet(models.QuerySet):
    def pending(self):
        return self.filter(status=Ceremony.Status.PENDING)

    def overdue(self):
        return self.pending().filter(expires_at__lte=timezone.now())

    def held_again(self, ceremony):
        """While it waits, the hold the server's answer to `ceremony`'s call, sent again,
        opened: another step, or a form."""
        same_call = {f: getattr(ceremony, f) for f in ("agent_id", "trace_id", "tool_name")}
        return (
            self.pending()
            .filter(**same_call, arguments_hash=ceremony.arguments_hash)
            .filter(created_at__gt=ceremony.created_at)
            .order_by("-created_at")
            .first()
        )

    def stranded(self, since):
        """Calls decided before `since` that the gateway has not taken up (their task was
        lost): approved and not running, or declined without their error."""
        from held.kinds import KINDS  # the kinds import this module

        run = [kind for kind, rules in KINDS.items() if rules.runs_on_decision]
        declined = Q(status__in=Ceremony.DECLINED, result__isnull=True)
        return self.filter(kind__in=run, decided_at__lt=since).filter(
            Q(status=Ceremony.Status.APPROVED) | declined
        )

    def abandoned(self, since):
        """Calls sent before `since` and never settled: the worker running them died. Not one
        whose server asked a person for a form since it was sent that is open, or closed after
        `since`: its worker waits for that person, and the call's clock starts again after."""
        asked = self.filter(
            kind=Ceremony.Kind.FORM,
            **{f: OuterRef(f) for f in ("mcplet", "agent_id", "arguments_hash")},
            created_at__gte=OuterRef("executed_at"),
            expires_at__gte=since,
        )
        executing = self.filter(status=Ceremony.Status.EXECUTING, executed_at__lt=since)
        return executing.exclude(Exists(asked))


class Ceremony(models.Model):
    """One held call (or result), waiting for a person (spec §4, §7.2, App. A).

    The call waits here, not in a worker: the run that asked is saved and the worker freed.
    Once decided, `held.lifecycle` runs it exactly once and tells the continuation. A strict
    tool's assertion is kept in the cache only until injection."""

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
        """Each kind's rules: its module in held/kinds/ (the registry is held/kinds/__init__)."""

        TOOL_CALL = "tool_call", "a tool call"
        RESULT = "result", "an agent's result (e.g. a plan) before its hand-off"
        STEP_UP = "step_up", "a tool call waiting for a person's step on the server's side"
        FORM = "form", "a form a server asks a person to fill in during a call"
        RERUN = "rerun", "a person's re-run of a call whose outcome is unknown"
        INPUT_FORM = "input_form", "a form a server asks a person to fill in before it answers"

    FINAL = (
        Status.EXECUTED,
        Status.REJECTED,
        Status.EXPIRED,
        Status.FAILED,
        Status.OUTCOME_UNKNOWN,
    )
    # Answered on the form page: during a call (2025-11-25) or before its retry (2026-07-28).
    FORMS = (Kind.FORM, Kind.INPUT_FORM)
    # The error code of a declined call; each kind says what it means (`rules.declined`).
    DECLINED = {Status.REJECTED: "X_APPROVAL_REJECTED", Status.EXPIRED: "X_APPROVAL_EXPIRED"}
    # The call as held, which a re-run copies; who asks is the `Asker`.
    CALL = (
        "mcplet",
        "server_name",
        "tool_name",
        "arguments",
        "arguments_hash",
        "prompt_message",
        "enforcement",
    )

    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.TOOL_CALL)
    token = models.CharField(max_length=64, unique=True, editable=False)
    nonce = models.CharField(max_length=64, editable=False)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    # Who asks: ids, not foreign keys, because held calls do not depend on the agents room.
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
    # Indexed: a run's end looks for the calls it still holds by this prefix (ending.finish).
    continuation_ref = models.CharField(max_length=100, blank=True, db_index=True)
    elicitations = models.JSONField(
        default=list,
        blank=True,
        help_text="A step-up's steps as the server sent them (URL or QR), shown to the person.",
    )
    # Sealed, never shown: a server's requestState is opaque and may carry what it must not
    # leak; it goes back to that server with this call's retry and nowhere else.
    input_round = SealedJSONField(
        null=True,
        blank=True,
        editable=False,
        help_text="What the retry of an MCP input_required round carries: the answers by "
        "key and the server's requestState.",
    )
    traceparent = models.CharField(
        max_length=55,
        blank=True,
        editable=False,
        help_text="The W3C traceparent of the span that held the call, when the host traces: "
        "what runs it once decided links to it (docs/tracing.md).",
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
        db_table = "passkey_ceremony"  # its first home; the rows stayed where they were
        verbose_name_plural = "ceremonies"
        ordering = ["-created_at"]
        permissions = [("approve_ceremony", "Can approve or reject tool calls with a passkey")]

    def __str__(self):
        return f"{self.tool_name} for {self.agent_id} ({self.status})"

    def get_absolute_url(self):
        return reverse("passkey:ceremony", args=[self.token])

    @classmethod
    def create_held(cls, kind, asker, **call):
        """The one way a held call's row is made: its kind, who asks, the call (`call`: CALL's
        fields, `tool_name` and `arguments` at least, and the kind's own), a fresh token and
        nonce, and its expiry."""
        call.setdefault("arguments_hash", arguments_hash(call["tool_name"], call["arguments"]))
        ttl = timedelta(seconds=settings.MCPLET_APPROVAL_TTL)
        call.setdefault("expires_at", timezone.now() + ttl)
        return cls.objects.create(
            kind=kind,
            traceparent=tracing.traceparent(),
            token=secrets.token_urlsafe(24),
            nonce=secrets.token_hex(32),
            **asker.row(),
            **call,
        )

    # --- what a person and the pages read ------------------------------------------------------

    @property
    def rules(self):
        """This kind's rules (held.kinds)."""
        from held.kinds import KINDS  # the kinds import this module

        return KINDS[self.kind]

    @property
    def asker(self):
        return Asker(
            self.agent_id,
            self.authority,
            self.proposed_by_model,
            self.trace_id,
            self.surface,
            self.continuation,
            self.continuation_ref,
        )

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
    def is_final(self):
        return self.status in self.FINAL

    @property
    def outcome(self):
        """The state as a person names it (an approved result was handed on, not executed)."""
        return self.rules.outcome(self)

    @property
    def error(self):
        """The error of a decided call ({code, message}), or None."""
        error = (self.result or {}).get("error") if isinstance(self.result, dict) else None
        return error if isinstance(error, dict) else None

    @property
    def is_overdue(self):
        return self.status == self.Status.PENDING and self.expires_at <= timezone.now()

    @property
    def seconds_left(self):
        # Rounded up: the page's countdown must not end before the server's expiry.
        return max(0, math.ceil((self.expires_at - timezone.now()).total_seconds()))

    @property
    def needs_assertion(self):
        """Strict tool calls carry the assertion to the MCPlet; the rest need the approval."""
        return self.rules.carries_assertion and self.enforcement == self.Enforcement.STRICT

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
    def declined(self):
        """(code, message) of a rejected or expired ceremony."""
        return self.DECLINED[self.status], self.rules.declined[self.status]

    def decline_error(self):
        code, message = self.declined
        return {"error": {"code": code, "message": message}}

    # --- a person's decision ----------------------------------------------------------------------

    @property
    def assertion_key(self):
        return f"ceremony:{self.pk}:assertion"

    def take_assertion(self):
        """The assertion, removed from the cache: it is injected once and never kept."""
        assertion = cache.get(self.assertion_key)
        cache.delete(self.assertion_key)
        return assertion

    def approve(self, user, assertion=None):
        """Record the approval and go on as the kind says. False if it is no longer pending
        (or its kind is never approved, e.g. a form: it is answered).

        One conditional UPDATE decides: of two decisions racing, the later waits on the row
        lock the first one's UPDATE took, then finds the call decided and changes nothing. Only
        a decision changes a call's columns, so a pending row is this instance as read. Where
        the kind writes nothing more (`decides_alone`), that UPDATE and its audit event are one
        statement on PostgreSQL (mcplet_host.guarded); else they share a transaction."""
        if not self.rules.approvable:
            return False
        now = timezone.now()
        pending = {"pk": self.pk, "status": self.Status.PENDING, "expires_at__gt": now}
        decided = {"status": self.Status.APPROVED, "decided_by": user, "decided_at": now}
        granted = self._decision(audit.EventType.PERMISSION_GRANTED, audit.SUCCESS, decided)
        guard = guarded.Guard(Ceremony, pending, decided)
        if self.rules.decides_alone:
            with suppress(guarded.NotKept):
                if not guarded.updated_and_audited(guard, [granted]):
                    return False
                self._approved(decided, assertion)
                return True
        with transaction.atomic():
            if not kept.update(Ceremony, pending, decided):
                return False
            audit.record_many([granted])
            self._approved(decided, assertion)
        return True

    def _approved(self, decided, assertion):
        """Once the approval is written: this instance as the row now is, heard by what
        listens to its saves; the assertion kept for the call; the kind's next step."""
        for name, value in decided.items():
            setattr(self, name, value)
        signals.saved(self, update_fields=set(decided))
        metrics.decided(self, self.decided_by)
        if assertion is not None:
            cache.set(self.assertion_key, assertion, ASSERTION_CACHE_TTL)
        self.rules.after_decision(self)

    def decline(self, status, user=None):
        """Reject or expire a pending ceremony; the call is resolved with an error, unexecuted."""
        with transaction.atomic():
            ceremony = Ceremony.objects.select_for_update().get(pk=self.pk)
            if ceremony.status != self.Status.PENDING:
                return False
            ceremony._decide(status, user)
            decided = {"status": status, "decided_by": user}
            denied = ceremony._decision(audit.EventType.PERMISSION_DENIED, audit.BLOCKED, decided)
            audit.record_many([denied])
            ceremony.rules.after_decision(ceremony)
        self._became(ceremony)
        return True

    def _became(self, row):
        """This instance is now `row`, as the transaction that decided it left it."""
        for field in self._meta.concrete_fields:
            setattr(self, field.attname, getattr(row, field.attname))
        self._state.fields_cache.clear()

    def _decide(self, status, user):
        self.status, self.decided_by, self.decided_at = status, user, timezone.now()
        self.save(update_fields=["status", "decided_by", "decided_at"])
        metrics.decided(self, user)

    def check_open(self):
        """Raise Refused unless a person may still decide."""
        if self.status != self.Status.PENDING:
            raise Refused(NOT_PENDING, f"This call is already {self.get_status_display()}.", 410)
        if self.is_overdue:
            raise Refused(EXPIRED, "This approval expired; nothing will run.", 410)

    def notify_continuation(self):
        if self.continuation:
            task, args = self.continuation, [self.pk, self.continuation_ref]
            transaction.on_commit(lambda: enqueue(task, args))

    # --- audit ----------------------------------------------------------------------------------

    def audit_event(self, event_type, result, details, by=None, system=""):
        """Record an audit event about this held call (`event`)."""
        audit.record_many([self.event(event_type, result, details, by, system)])

    def event(self, event_type, result, details, by=None, system=""):
        """An audit event about this held call (unsaved): the person who acted (`by`) or else
        the part of the system named `system`, its tool and trace, and `details`."""
        return audit.event(
            event_type,
            actor_type=audit.ActorType.USER if by else audit.ActorType.SYSTEM,
            actor_id=by.get_username() if by else system,
            target_server=self.server_name,
            target_tool=self.tool_name,
            result=result,
            trace_id=self.trace_id,
            details={"ceremony": self.token[:8], **details},
        )

    def _decision(self, event_type, result, decided):
        """The event of a decision (unsaved): who decided what — never the assertion itself."""
        details = {
            "status": decided["status"],
            "agent": self.agent_id,
            **self.authority.audit_details(),
            **self.lineage,
            "arguments_hash": self.arguments_hash,
        }
        return self.event(event_type, result, details, by=decided["decided_by"])
