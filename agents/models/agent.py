"""An agent of this host: its prompt or handler, its pools, whom it hands off to, its schedule,
and, for a remote one, its card and credentials."""

import json

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from a2a import outbound
from a2a.schemas import json_path
from a2a.webhooks import validate_networks
from mcplet_host import jsonschemas, storable
from pools.fields import SealedJSONField
from pools.models import Pool, validate_http_url


class Agent(models.Model):
    """An internal, Director or external (partner) agent, or a remote A2A agent ours call. Every
    kind but remote is granted pools the same way: `accessible_pools` is the grant table of spec
    §3.4, §3.6 and §16.1. A remote agent holds none: being called gives it nothing of ours."""

    class Kind(models.TextChoices):
        INTERNAL = "internal"
        DIRECTOR = "director"
        EXTERNAL = "external", "external (partner)"
        REMOTE = "remote", "remote A2A agent"

    agent_id = models.SlugField(
        max_length=100, unique=True, help_text="The A2A agentId, e.g. info-gathering-agent."
    )
    display_name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.INTERNAL)
    enabled = models.BooleanField(default=True)
    accessible_pools = models.ManyToManyField(
        Pool,
        blank=True,
        related_name="agents",
        help_text="The pools this agent may call. With none it reaches only pool-less MCPlets "
        "(spec §3.4). Grants come only from here: nothing an MCPlet, a message or an LLM says "
        "can widen them (§5.3.3, §16.2).",
    )
    input_schema = models.JSONField(
        validators=[storable.validate, jsonschemas.validate],
        default=dict,
        blank=True,
        help_text="JSON Schema of the task parameters it accepts (§18.2).",
    )
    output_schema = models.JSONField(
        validators=[storable.validate, jsonschemas.validate],
        default=dict,
        blank=True,
        help_text="JSON Schema of the result it returns (§18.2).",
    )
    version = models.CharField(max_length=32, default="1.0.0")

    # The built-in LLM agent.
    system_prompt = models.TextField(
        blank=True, help_text="What the agent is for; the task's parameters are added to it."
    )
    model = models.CharField(
        max_length=200,
        blank=True,
        help_text="A litellm model string (e.g. openai/gpt-4o, anthropic/claude-sonnet-4-6) or "
        "scripted/NAME for the offline scripted model playing the script NAME.yaml (e.g. "
        "scripted/reference). Empty: MCPLET_LLM_MODEL.",
    )
    hands_off_to = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="handed_from",
        help_text="The agent that receives this agent's result as its next task (same contextId).",
    )
    result_needs_approval = models.BooleanField(
        default=False,
        help_text="A person approves the result (host-only passkey ceremony) before the hand-off.",
    )
    approval_prompt = models.CharField(
        max_length=300, blank=True, help_text="Shown to the approver, e.g. 'Approve the plan'."
    )
    handler = models.CharField(
        max_length=200,
        blank=True,
        help_text="Optional dotted path to a Python class that replaces the built-in LLM loop.",
    )
    max_steps = models.PositiveSmallIntegerField(
        default=8, help_text="LLM turns before the run stops as partial."
    )
    token_budget = models.PositiveIntegerField(
        default=60000, help_text="Tokens (prompt + completion) before the run stops."
    )

    class ToolMode(models.TextChoices):
        """MGP §16.3's context levels: which tool schemas each LLM turn carries."""

        AUTO = "auto", "automatic (all tools; hybrid past the host's threshold)"
        ALL = "all", "all tools in context (L0)"
        DISCOVERY = "discovery", "discovery only (L2)"
        HYBRID = "hybrid", "pinned tools and discovery (L3)"

    tool_mode = models.CharField(
        max_length=16,
        choices=ToolMode.choices,
        default=ToolMode.AUTO,
        help_text="Discovery gives the model the mgp.tools.discover and mgp.tools.request "
        "meta-tools instead of every schema; they search only the tools this agent may call.",
    )
    pinned_tools = models.JSONField(
        validators=[storable.validate],
        default=list,
        blank=True,
        help_text='Hybrid: names of tools always in context, e.g. ["read_file"] (still only '
        "those the agent may call).",
    )

    # The Director (spec §3.4): a cron-started agent that dispatches one task per cycle.
    prompt_template = models.TextField(
        blank=True,
        help_text="Director: rendered each cycle (Django template; {{ today }}, {{ tomorrow }}, "
        "{{ targets }}) and given to the LLM. Nothing the LLM says can change it.",
    )
    targets = models.ManyToManyField(
        "self",
        symmetrical=False,
        blank=True,
        related_name="directed_by",
        help_text="Director: the only agents it may dispatch to.",
    )
    max_retries = models.PositiveSmallIntegerField(
        default=3, help_text="Director: LLM retries per cycle before the cycle fails."
    )
    backoff_seconds = models.FloatField(
        default=5.0, help_text="Director: first retry delay, doubled at each retry."
    )
    overlap_policy = models.CharField(
        max_length=8,
        choices=[("skip", "skip the new trigger"), ("queue", "queue it until the cycle ends")],
        default="skip",
        help_text="Director: when a trigger fires while a cycle is still running (§3.4).",
    )
    lock_timeout = models.PositiveIntegerField(
        default=120,
        help_text="Director: seconds the cycle lock lives without a heartbeat (a crashed worker "
        "blocks the schedule at most this long).",
    )
    schedule = models.OneToOneField(
        PeriodicTask,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="director",
        help_text="Director: its cron schedule, editable under Periodic tasks.",
    )

    # A partner (kind = external): whom it may call, and what it asked for (never a grant).
    callable_agents = models.ManyToManyField(
        "self",
        symmetrical=False,
        blank=True,
        related_name="callable_by",
        help_text="Partner: the internal agents it may send tasks to. Its tasks run with the "
        "pools both it and the recipient hold (§16.4).",
    )
    advertised_card = models.JSONField(
        null=True, blank=True, editable=False, help_text="Partner: the card it last advertised."
    )

    # A remote A2A agent (kind = remote): our agents hand off to it over A2A JSON-RPC.
    # A partner's own identity provider (A2A's OpenID Connect scheme): a bearer JWT its issuer
    # signed authenticates it as its keys do (a2a/identity.py).
    oidc_issuer = models.CharField(
        "issuer",
        max_length=500,
        blank=True,
        validators=[validate_http_url],
        help_text="Partner: the exact iss of the tokens its identity provider signs, e.g. "
        "https://login.acme.example. Empty: keys only.",
    )
    oidc_jwks_url = models.CharField(
        "JWKS URL",
        max_length=500,
        blank=True,
        validators=[validate_http_url],
        help_text="Where the issuer publishes its signing keys. Empty: the jwks_uri of its "
        "OpenID discovery document (the issuer URL + /.well-known/openid-configuration).",
    )
    oidc_audience = models.CharField(
        "audience",
        max_length=500,
        blank=True,
        help_text="The aud its tokens must carry for this host.",
    )
    oidc_claim = models.CharField(
        "partner claim",
        max_length=100,
        default="sub",
        help_text="The claim that names the partner (sub, azp, client_id…).",
    )
    oidc_subject = models.CharField(
        "claim value",
        max_length=500,
        blank=True,
        help_text="That claim's value for this partner. Empty: its agent id.",
    )
    push_networks = models.TextField(
        "webhook networks",
        blank=True,
        validators=[validate_networks],
        help_text="Partner: private networks its push-notification webhooks may be on, as "
        "CIDRs (10.20.0.0/16, 127.0.0.1/32), by lines or commas. Empty: public addresses only.",
    )
    card_url = models.CharField(
        max_length=500,
        blank=True,
        validators=[validate_http_url],
        help_text="Remote: its agent card, e.g. https://agents.example/.well-known/agent-card.json "
        "(or the agent's base URL).",
    )
    credentials = SealedJSONField(
        default=dict,
        blank=True,
        help_text="Remote: request headers sent to it, e.g. Authorization (stored sealed).",
    )
    remote_card = models.JSONField(
        null=True, blank=True, editable=False, help_text="Remote: its card, as last fetched."
    )
    card_fetched_at = models.DateTimeField(null=True, blank=True, editable=False)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["agent_id"]

    def __str__(self):
        return self.agent_id

    @property
    def is_internal(self):
        return self.kind in (self.Kind.INTERNAL, self.Kind.DIRECTOR)

    @property
    def on_bus(self):
        """It sends and receives tasks on the local bus: ours, and the remote agents operators
        registered (the host calls them, and posts their answers itself)."""
        return self.is_internal or self.kind == self.Kind.REMOTE

    def clean(self):
        if self.kind == self.Kind.REMOTE and not self.card_url:
            raise ValidationError({"card_url": "A remote agent needs the URL of its card."})
        if not isinstance(self.credentials, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.credentials.items()
        ):
            raise ValidationError({"credentials": "Give header names and string values."})
        if self.oidc_issuer and not self.oidc_audience:
            raise ValidationError({"oidc_audience": "Give the audience its tokens carry."})
        if not isinstance(self.pinned_tools, list) or not all(
            isinstance(name, str) for name in self.pinned_tools
        ):
            raise ValidationError({"pinned_tools": 'Give a list of tool names: ["read_file"].'})
        if loop := self._hand_off_loop():
            raise ValidationError({"hands_off_to": f"It leads back here: {' → '.join(loop)}."})

    def _hand_off_loop(self):
        """The agents its hand-offs pass through back to itself, or []: a loop would run its
        agents one after another until the authority's chain is full (64 LLM runs)."""
        path, seen, target = [self.agent_id], {self.pk}, self.hands_off_to
        while target is not None and target.pk not in seen:
            path.append(target.agent_id)
            seen.add(target.pk)
            target = target.hands_off_to
        return [*path, self.agent_id] if target is not None and target.pk == self.pk else []

    def refresh_card(self):
        """Fetch a remote agent's card (outbound.RemoteError if it cannot be had), unsaved."""
        card = outbound.fetch_card(self.card_url, self.credentials)
        outbound.jsonrpc_url(card)  # a card we could never call is refused now
        self.remote_card, self.card_fetched_at = card, timezone.now()
        return card

    def schedule_cron(self, expression):
        """Run this Director on a cron schedule ("minute hour day month weekday", in TIME_ZONE),
        as a django-celery-beat periodic task operators can pause and edit in admin."""
        try:
            minute, hour, day, month, weekday = expression.split()
        except ValueError:
            raise ValueError(f"{expression!r} is not a cron expression of five fields") from None
        crontab, _ = CrontabSchedule.objects.get_or_create(
            minute=minute,
            hour=hour,
            day_of_month=day,
            month_of_year=month,
            day_of_week=weekday,
            timezone=settings.TIME_ZONE,
        )
        task, _ = PeriodicTask.objects.update_or_create(
            name=f"Director {self.agent_id}",
            defaults={
                "crontab": crontab,
                "interval": None,
                "task": "agents.run_director",
                "args": json.dumps([self.agent_id]),
            },
        )
        self.schedule = task
        self.save(update_fields=["schedule"])
        return task

    @property
    def requested_pools(self):
        """Pools a partner asked for in its card (§18.1: a request, never a grant)."""
        return list((self.advertised_card or {}).get("requestedPools") or [])

    def pools_beyond_callable_agents(self):
        """Partner pools that no internal agent it may call holds: a partner never exceeds an
        equivalent internal agent (§16.4), so these grants give it nothing but warn operators."""
        held = Pool.objects.filter(agents__in=self.callable_agents.all())
        return list(self.accessible_pools.exclude(pk__in=held).values_list("name", flat=True))

    def parameters_problem(self, parameters):
        """§18.4: where and why task `parameters` break this agent's inputSchema, as (JSON path
        in the task request, message), or None when they match (or it declares none)."""
        schema = self.input_schema
        if not schema:
            return None
        try:
            problem = jsonschemas.first_error(schema, parameters)
        except jsonschemas.Unusable as exc:
            return json_path(["payload", "parameters"]), f"the inputSchema of {self.agent_id} {exc}"
        if problem is None:
            return None
        path = json_path(["payload", "parameters", *problem.absolute_path])
        return path, f"{problem.message} (the inputSchema of {self.agent_id}, §18.4)"

    def card(self):
        """The agent's §18.2 card."""
        card = {"agentId": self.agent_id, "displayName": self.display_name, "version": self.version}
        if self.description:
            card["description"] = self.description
        if self.input_schema:
            card["inputSchema"] = self.input_schema
        if self.output_schema:
            card["outputSchema"] = self.output_schema
        return card
