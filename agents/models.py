from django.db import models

from pools.models import Pool


class Agent(models.Model):
    """An internal, Director or external (partner) agent. Every kind is granted pools the same
    way: `accessible_pools` is the grant table of spec §3.4, §3.6 and §16.1."""

    class Kind(models.TextChoices):
        INTERNAL = "internal"
        DIRECTOR = "director"
        EXTERNAL = "external", "external (partner)"

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
        default=dict, blank=True, help_text="JSON Schema of the task parameters it accepts (§18.2)."
    )
    output_schema = models.JSONField(
        default=dict, blank=True, help_text="JSON Schema of the result it returns (§18.2)."
    )
    version = models.CharField(max_length=32, default="1.0.0")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["agent_id"]

    def __str__(self):
        return self.agent_id
