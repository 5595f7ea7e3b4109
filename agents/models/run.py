"""A run of an agent (`Agent`): its durable state, its lease, its end."""

import uuid
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from a2a.models import A2AMessage
from agents.models.agent import Agent
from held.models import Ceremony
from mcplet_host import kept, registry, signals
from mcplet_host.authority import Authority


class LeaseLost(Exception):
    """The run is no longer this worker's: its lease ran out and another worker took it up, or
    it ended meanwhile. The worker stops its pass and writes nothing more."""


class AgentRun(models.Model):
    """The durable state of one agent run: the task, the LLM transcript, the tool calls and
    their envelopes. A run waiting for an approval holds no worker; whichever worker picks it
    up next continues from here."""

    class Status(models.TextChoices):
        RUNNING = "running"
        AWAITING_APPROVAL = "awaiting_approval", "awaiting approval"
        SUCCESS = "success"
        # The values are the A2A statuses (§18); the labels say what happened.
        ERROR = "error", "Failed"
        TIMEOUT = "timeout", "Timed out"
        CANCELLED = "cancelled"  # by someone: an operator's cancel, an approver's Reject
        PARTIAL = "partial"

    FINAL = (Status.SUCCESS, Status.ERROR, Status.TIMEOUT, Status.CANCELLED, Status.PARTIAL)
    # Written when the run is created (runner.start) and never after: its end leaves them be.
    CREATED_WITH = (
        "agent_id",
        "provenance",
        "request_id",
        "context_id",
        "otel_trace_id",
        "parameters",
        "started_at",
    )
    # What an LLM turn changes (runner.Loop._think), saved with `keep`.
    TURN = ("steps", "prompt_tokens", "completion_tokens", "transcript", "result", "output_retries")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="runs")
    provenance = models.JSONField(
        default=dict,
        blank=True,
        help_text="Who the run acts for: the partner its workflow started for and the agents "
        "before it (from its signed task request).",
    )
    request = models.OneToOneField(
        A2AMessage, null=True, blank=True, on_delete=models.SET_NULL, related_name="run"
    )
    context_id = models.CharField(max_length=64, db_index=True)
    otel_trace_id = models.CharField(
        max_length=32,
        blank=True,
        editable=False,
        help_text="The OpenTelemetry trace the run started in, when the host traces.",
    )
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING)
    parameters = models.JSONField(default=dict, blank=True)
    transcript = models.JSONField(default=list, blank=True)
    actions = models.JSONField(default=list, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    steps = models.PositiveIntegerField(default=0)
    output_retries = models.PositiveSmallIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    # Tools its model found with the discovery meta-tools: in context for the rest of the run.
    discovered_tools = models.JSONField(default=list, blank=True)
    waiting_for = models.ForeignKey(
        Ceremony, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Set, and committed, before the run lets the gateway hold anything for a person: its end
    # looks for calls it left pending only then (ending.finish).
    may_have_held = models.BooleanField(default=False, editable=False)
    lease_until = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=64, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["status", "-started_at"])]

    def __str__(self):
        return f"{self.agent.agent_id} run {str(self.id)[:8]} ({self.status})"

    @property
    def is_final(self):
        return self.status in self.FINAL

    def traced(self):
        """Its span's attributes (mcplet_host.tracing): the GenAI semantic conventions' for an
        agent's run, and the host's own."""
        return {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": self.agent.agent_id,
            "gen_ai.conversation.id": self.context_id,
            "mcplet.run.id": str(self.pk),
            "mcplet.partner": self.authority.partner,
        }

    @property
    def authority(self):
        return Authority.from_json(self.provenance)

    @property
    def total_tokens(self):
        return self.prompt_tokens + self.completion_tokens

    @staticmethod
    def lease_end(now):
        """When a lease taken at `now` runs out (a dead worker's lease simply expires)."""
        return now + timedelta(seconds=settings.MCPLET_RUN_LEASE)

    @classmethod
    def claim(cls, run_id, owner):
        """Take the run's lease so one worker at a time advances it. True if taken."""
        now = timezone.now()
        return bool(
            cls.objects.filter(pk=run_id, status=cls.Status.RUNNING)
            .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now) | Q(lease_owner=owner))
            .update(lease_until=cls.lease_end(now), lease_owner=owner)
        )

    def why_stop(self, agent):
        """(status, error) when the run must stop before its next LLM turn, else None: its
        agent disabled (or deleted) since, as the registry has it now (an operator's Disable
        stops the work at its next step, its LLM's too; its first turn follows the delivery
        that checked it), or its step limit or token budget reached."""
        holder = registry.current().holder(agent.agent_id) if self.steps else None
        if self.steps and (holder is None or not holder.enabled):
            message = f"The agent {agent.agent_id} was disabled: its run stopped."
            return self.Status.ERROR, {"message": message, "code": "X_ACCESS_DENIED"}
        if self.steps >= agent.max_steps:
            message = f"Stopped after {self.steps} LLM turns (the agent's step limit)."
            return self.Status.PARTIAL, {"message": message, "code": "X_STEP_LIMIT"}
        if self.total_tokens >= agent.token_budget:
            message = f"Stopped at {self.total_tokens} tokens (the agent's token budget)."
            return self.Status.PARTIAL, {"message": message, "code": "X_TOKEN_BUDGET"}
        return None

    def keep(self, *fields):
        """Save `fields` mid-pass, and renew the lease with them, only while this copy's worker
        holds it: one conditional UPDATE, at each step of a pass (a pass may outlast a lease,
        never a step). Else LeaseLost, and nothing written: a worker whose lease ran out must
        not write over the run another worker took up, nor an end. (An ended run, and one let
        go, have no owner: the owner alone guards.)"""
        if not self.lease_owner:  # a copy that holds no lease (`read_again`)
            raise LeaseLost(self.pk)
        now = timezone.now()
        self.updated_at, self.lease_until = now, self.lease_end(now)
        fields = (*fields, "updated_at", "lease_until")
        values = {f.attname: getattr(self, f.attname) for f in map(self._meta.get_field, fields)}
        if not kept.update(AgentRun, {"pk": self.pk, "lease_owner": self.lease_owner}, values):
            raise LeaseLost(self.pk)
        signals.saved(self, fields)  # as save() did: the dashboard's live view hears it

    @classmethod
    def stalled(cls, since):
        """Running runs no worker holds (its lease expired or was let go), untouched since."""
        return cls.objects.filter(status=cls.Status.RUNNING, updated_at__lt=since).filter(
            Q(lease_until__isnull=True) | Q(lease_until__lt=timezone.now())
        )

    @classmethod
    def waiting_on_decided(cls, since):
        """Runs still waiting on a call that was decided (its continuation was lost)."""
        return cls.objects.filter(
            status=cls.Status.AWAITING_APPROVAL,
            updated_at__lt=since,
            waiting_for__status__in=Ceremony.FINAL,
        ).select_related("waiting_for")

    def end(self, status, *, result=None, error=None, leased=True):
        """Save the run as ended, with all it holds unsaved, unless it had ended already: an
        operator's cancel and a worker's finish may race, and whichever commits first stands.
        One conditional UPDATE of every column (`ending`): the loser waits on the row lock the
        winner's UPDATE took, then finds the row ended and changes nothing. False then, and the
        run is read again as it stands. A worker's end (`leased`) applies only while it holds
        the lease (`ended_where`); an operator's cancel whoever holds it."""
        where, exclude = self.ended_where(leased)
        values = self.ending(status, result=result, error=error)
        if kept.update(AgentRun, where, values, exclude=exclude):
            signals.saved(self)  # the dashboard's live view hears this save too
            return True
        self.read_again()
        return False

    def read_again(self):
        """The run as it stands, after an end that changed nothing. The copy holds no lease
        then, whoever does: a stale worker's copy never takes up another worker's."""
        self.refresh_from_db()
        self.lease_owner, self.lease_until = "", None

    def ended_where(self, leased=True):
        """Which row `end` changes: the run unless it has ended; by a worker (`leased`), only
        while the lease is this copy's, so a worker whose lease ran out ends nothing. An ended
        run is nobody's (`ending`), so a holder's end needs no look at the status (and the
        hand-off's end statement stays within psycopg's 50 values)."""
        where, exclude = {"pk": self.pk}, {"status__in": self.FINAL}
        if leased:
            where["lease_owner"] = self.lease_owner
            if self.lease_owner:
                exclude = None
        return where, exclude

    def ending(self, status, *, result=None, error=None):
        """The run as ended, unsaved: the value of every column a run changes, for `end`'s
        conditional UPDATE (not those it was created with: with them, a hand-off's end statement
        took 57 values, and psycopg parses a statement of more than 50 anew at every call)."""
        self.status, self.finished_at = status, timezone.now()
        if result is not None:
            self.result = result
        self.error = error
        self.lease_until, self.lease_owner = None, ""  # an ended run is nobody's to advance
        fields = self._meta.concrete_fields
        return {
            f.attname: f.pre_save(self, False)
            for f in fields
            if not f.primary_key and f.attname not in self.CREATED_WITH
        }

    def may_hold(self):
        """Say, committed, that the run may hold something for a person, before the gateway can:
        its end then looks for what it left pending, even if its worker dies after the hold."""
        if not self.may_have_held:
            self.may_have_held = True
            AgentRun.objects.filter(pk=self.pk).update(may_have_held=True)

    def pending_calls(self):
        """The calls the run held that nobody decided yet."""
        return Ceremony.objects.pending().filter(continuation_ref__startswith=f"{self.pk}:")

    def left_pending(self):
        """Whether the run left a call pending. Asked of the database only if it may have held
        one; an EXISTS, half the CPU of selecting the columns of none."""
        return self.may_have_held and self.pending_calls().exists()

    def reject_pending_calls(self):
        """A call the run held and nobody decided must not run once it has ended (it broke after
        the hold): rejected, its continuation finds the run ended."""
        if self.left_pending():  # rarely any
            for ceremony in self.pending_calls():
                ceremony.decline(Ceremony.Status.REJECTED)

    def release(self, owner):
        mine = {"pk": self.pk, "lease_owner": owner}
        kept.update(AgentRun, mine, {"lease_until": None, "lease_owner": ""})
