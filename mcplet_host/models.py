import hashlib
import json

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

GENESIS_HASH = "0" * 64


class AuditEvent(models.Model):
    """One audit event in the MGP §6.3 shape, append-only and hash-chained.

    `hash` covers every field of the row and `prev_hash`, so editing a row breaks its own hash
    and deleting one breaks the link of the next (`manage.py verify_audit`). Write through
    `mcplet_host.audit.record()` only.
    """

    class EventType(models.TextChoices):
        TOOL_EXECUTED = "TOOL_EXECUTED"
        TOOL_BLOCKED = "TOOL_BLOCKED"
        PERMISSION_GRANTED = "PERMISSION_GRANTED"
        PERMISSION_DENIED = "PERMISSION_DENIED"
        PERMISSION_REVOKED = "PERMISSION_REVOKED"
        ACCESS_GRANTED = "ACCESS_GRANTED"
        ACCESS_REVOKED = "ACCESS_REVOKED"
        SERVER_CONNECTED = "SERVER_CONNECTED"
        SERVER_DISCONNECTED = "SERVER_DISCONNECTED"
        VALIDATION_FAILED = "VALIDATION_FAILED"

    class ActorType(models.TextChoices):
        AGENT = "agent"
        PARTNER = "partner"
        USER = "user"
        SYSTEM = "system"

    seq = models.PositiveBigIntegerField(unique=True, editable=False)
    timestamp = models.DateTimeField(db_index=True)
    trace_id = models.CharField(max_length=64, blank=True, db_index=True)
    # MGP §6.4 types, or custom ones in reverse-domain notation (e.g. "mcplet.tool.accepted").
    event_type = models.CharField(max_length=64, db_index=True)
    actor_type = models.CharField(max_length=16, choices=ActorType.choices)
    actor_id = models.CharField(max_length=200, blank=True, db_index=True)
    target_server = models.CharField(max_length=200, blank=True)
    target_tool = models.CharField(max_length=200, blank=True, db_index=True)
    result = models.CharField(max_length=32)
    details = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    prev_hash = models.CharField(max_length=64, editable=False)
    hash = models.CharField(max_length=64, editable=False)

    class Meta:
        ordering = ["-seq"]
        indexes = [models.Index(fields=["event_type", "timestamp"])]

    def __str__(self):
        return f"#{self.seq} {self.event_type} {self.actor_type}:{self.actor_id} → {self.result}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise ValueError("Audit events are append-only: they cannot be changed.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("Audit events are append-only: they cannot be deleted.")

    def as_mgp(self):
        """The event as MGP §6.3 `params`."""
        return {
            "timestamp": self.timestamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "trace_id": self.trace_id,
            "event_type": self.event_type,
            "actor": {"type": self.actor_type, "id": self.actor_id},
            "target": {"server_id": self.target_server, "tool_name": self.target_tool},
            "result": self.result,
            "details": self.details,
        }

    def content_digest(self):
        """SHA-256 of the event as MGP params (everything but its place in the chain)."""
        canonical = json.dumps(
            self.as_mgp(), sort_keys=True, separators=(",", ":"), cls=DjangoJSONEncoder
        )
        return hashlib.sha256(canonical.encode()).hexdigest()

    def compute_hash(self):
        """The link: the previous hash, this event's place and its content. PostgreSQL computes
        the same in the append (migration 0006) while it holds the chain head."""
        return chain_hash(self.prev_hash, self.seq, self.content_digest())

    def legacy_hash(self):
        """How events appended before migration 0006 were hashed (one JSON of all fields)."""
        payload = {"seq": self.seq, "prev_hash": self.prev_hash, **self.as_mgp()}
        canonical = json.dumps(
            payload, sort_keys=True, separators=(",", ":"), cls=DjangoJSONEncoder
        )
        return hashlib.sha256(canonical.encode()).hexdigest()


def chain_hash(prev_hash, seq, digest):
    return hashlib.sha256(f"{prev_hash}:{seq}:{digest}".encode()).hexdigest()


class AuditChainHead(models.Model):
    """The single row locked by every append, so concurrent writers extend one chain."""

    last_seq = models.PositiveBigIntegerField(default=0)
    last_hash = models.CharField(max_length=64, default=GENESIS_HASH)

    def __str__(self):
        return f"audit chain head at #{self.last_seq}"


class RegistryVersion(models.Model):
    """One row whose `token` database triggers replace at every write to what the gateway
    checks (MCPlets, servers, pools, agents, their pool grants), in the writer's transaction,
    whoever writes: the ORM, a queryset update, raw SQL, another process. The gateway keeps
    what it read while the token stays the same (mcplet_host.gateway.registry)."""

    token = models.CharField(max_length=64)

    def __str__(self):
        return f"registry version {self.token}"
