import hashlib
import hmac
import secrets
from datetime import timedelta

from django.db import models
from django.utils import timezone

from mcplet_host import registry
from mcplet_host.authority import Authority
from pools.fields import SealedJSONField

KEY_PREFIX = "mcpk_"


def hash_key(raw_key):
    # Keys carry 256 bits of randomness, so a fast hash is enough (no password stretching).
    return hashlib.sha256(raw_key.encode()).hexdigest()


_last_marked = {}  # PartnerKey pk → when this process last wrote its last_used_at


class PartnerKey(models.Model):
    """An external agent's API key. Only its SHA-256 is stored; the key is shown once."""

    agent = models.ForeignKey(
        "agents.Agent",
        on_delete=models.CASCADE,
        related_name="partner_keys",
        limit_choices_to={"kind": "external"},
    )
    name = models.CharField(max_length=100, help_text="What the key is for, e.g. 'production'.")
    prefix = models.CharField(
        max_length=16, unique=True, editable=False, help_text="The key's first characters."
    )
    key_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires.")
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.prefix}… ({self.agent.agent_id}, {self.name})"

    @classmethod
    def issue(cls, agent, name, expires_at=None):
        """Create a key for `agent`; returns (PartnerKey, raw key). The raw key is never stored."""
        raw = KEY_PREFIX + secrets.token_urlsafe(32)
        key = cls.objects.create(
            agent=agent,
            name=name,
            prefix=raw[: len(KEY_PREFIX) + 8],
            key_hash=hash_key(raw),
            expires_at=expires_at,
        )
        return key, raw

    @classmethod
    def lookup(cls, raw_key):
        """(key, "") for a live key, else (key or None, "unknown" | "revoked" | "expired").
        The key and its agent are kept with the registry (mcplet_host.registry): a key or an
        agent changed in any way, by anyone, is read afresh by the very next request."""
        if not raw_key or not raw_key.startswith(KEY_PREFIX):
            return None, "unknown"
        prefix, snapshot = raw_key[: len(KEY_PREFIX) + 8], registry.current()
        prefixes = snapshot.kept(
            "partner key prefixes", lambda: frozenset(cls.objects.values_list("prefix", flat=True))
        )
        key = prefix in prefixes and snapshot.copy_of(
            ("partner key", prefix),
            lambda: cls.objects.select_related("agent").filter(prefix=prefix).first(),
        )
        if not key or not hmac.compare_digest(key.key_hash, hash_key(raw_key)):
            return None, "unknown"
        key.agent.registry_snapshot = snapshot  # what the rest of its request reads from
        if not key.is_active:
            return key, key.state
        key.mark_used()
        return key, ""

    def mark_used(self):
        """At most one write a minute per key and process: "last used" needs no more
        precision (and the write does not move the registry's token)."""
        now = timezone.now()
        last = max(filter(None, (self.last_used_at, _last_marked.get(self.pk))), default=None)
        if last is None or now - last > timedelta(minutes=1):
            _last_marked[self.pk] = now
            PartnerKey.objects.filter(pk=self.pk).update(last_used_at=now)

    @classmethod
    def authenticate(cls, raw_key):
        """The live key matching `raw_key`, or None (unknown, revoked, expired)."""
        key, problem = cls.lookup(raw_key)
        return None if problem else key

    @property
    def is_active(self):
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()

    @property
    def state(self):
        if self.revoked_at is not None:
            return "revoked"
        if not self.is_active:
            return "expired"
        return "active"

    def revoke(self):
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])


class A2AMessage(models.Model):
    """One serialized A2A message (§18): the trace of the local bus and the external endpoint.
    Local messages are signed by the host; a worker delivers only what verifies."""

    class Type(models.TextChoices):
        TASK_REQUEST = "task_request"
        TASK_RESPONSE = "task_response"

    class State(models.TextChoices):
        QUEUED = "queued"
        DELIVERED = "delivered"
        ANSWERED = "answered"
        REFUSED = "refused"

    message_id = models.UUIDField(unique=True)
    context_id = models.UUIDField(db_index=True)
    type = models.CharField(max_length=16, choices=Type.choices)
    sender_id = models.CharField(max_length=100, db_index=True)
    recipient_id = models.CharField(max_length=100, db_index=True)
    reply_to = models.UUIDField(null=True, blank=True, db_index=True)
    body = models.JSONField(help_text="The message exactly as sent (§18 camelCase keys).")
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    status = models.CharField(max_length=16, blank=True, help_text="A response's A2A status.")
    external = models.BooleanField(default=False, help_text="Came in through the partner API.")
    provenance = models.JSONField(
        default=dict,
        blank=True,
        help_text="Who the task acts for: the partner it started for and the agents before its "
        "recipient (set by the host, signed with the body).",
    )
    signature = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at"]
        verbose_name = "A2A message"
        constraints = [
            # Every request gets exactly one task response.
            models.UniqueConstraint(
                fields=["reply_to"],
                condition=models.Q(type="task_response"),
                name="one_response_per_request",
            )
        ]

    def __str__(self):
        return f"{self.type} {self.sender_id} → {self.recipient_id} ({self.state or self.status})"

    @property
    def authority(self):
        """The provenance as a value (ValueError if it is not one the host writes)."""
        return Authority.from_json(self.provenance)

    @property
    def parameters(self):
        return (self.body.get("payload") or {}).get("parameters") or {}


class PushConfig(models.Model):
    """A partner's webhook for one of its tasks (A2A 1.0 TaskPushNotificationConfig): each
    change of the task becomes a PushDelivery, POSTed in order by a2a.push. The token and the
    credentials are sealed at rest and never shown again."""

    task = models.ForeignKey(A2AMessage, on_delete=models.CASCADE, related_name="push_configs")
    config_id = models.CharField("id", max_length=100, help_text="The partner's name for it.")
    url = models.CharField(max_length=2048, help_text="Where the task's changes are POSTed.")
    auth_scheme = models.CharField(
        max_length=50, blank=True, help_text="The Authorization scheme of each POST, e.g. Bearer."
    )
    sealed = SealedJSONField(default=dict, blank=True, editable=False)
    last_status = models.JSONField(
        help_text="The task's status as the webhook was last told it (the next change's start)."
    )
    next_sequence = models.PositiveIntegerField(default=1, editable=False)
    lease_until = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "pk"]
        verbose_name = "push notification config"
        constraints = [
            models.UniqueConstraint(fields=["task", "config_id"], name="one_config_id_per_task")
        ]

    def __str__(self):
        return f"{self.config_id} → {self.url}"

    def as_wire(self, tenant=""):
        """The TaskPushNotificationConfig, its secrets left out (the partner has them)."""
        config = {"id": self.config_id, "taskId": str(self.task.message_id), "url": self.url}
        if self.auth_scheme:
            config["authentication"] = {"scheme": self.auth_scheme}
        return {**({"tenant": tenant} if tenant else {}), **config}

    def headers(self):
        """The credentials each POST carries: the Authorization the partner configured, and its
        token under both names A2A SDKs read (the specification names no header)."""
        headers = {}
        if self.auth_scheme:
            credentials = self.sealed.get("credentials", "")
            headers["Authorization"] = f"{self.auth_scheme} {credentials}".strip()
        if self.sealed.get("token"):
            headers["X-A2A-Notification-Token"] = self.sealed["token"]
            headers["A2A-Notification-Token"] = self.sealed["token"]
        return headers

    def take_lease(self, seconds):
        """This process sends the config's deliveries for `seconds`, unless another does."""
        now = timezone.now()
        taken = (
            PushConfig.objects.filter(pk=self.pk)
            .filter(models.Q(lease_until__isnull=True) | models.Q(lease_until__lt=now))
            .update(lease_until=now + timedelta(seconds=seconds))
        )
        return taken == 1

    def release_lease(self):
        PushConfig.objects.filter(pk=self.pk).update(lease_until=None)


class PushDelivery(models.Model):
    """One notification for one webhook: a StreamResponse, POSTed as it is on every attempt
    (so a receiver recognises a repeat), after the one before it has been delivered or given
    up."""

    class State(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    config = models.ForeignKey(PushConfig, on_delete=models.CASCADE, related_name="deliveries")
    sequence = models.PositiveIntegerField()
    event = models.JSONField(help_text="The StreamResponse POSTed.")
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["config", "sequence"]
        verbose_name_plural = "push deliveries"
        constraints = [
            models.UniqueConstraint(fields=["config", "sequence"], name="one_delivery_per_step")
        ]
        indexes = [models.Index(fields=["state", "next_attempt_at"])]

    def __str__(self):
        return f"#{self.sequence} {self.kind} ({self.state})"

    @property
    def kind(self):
        """statusUpdate <state>, artifactUpdate or task."""
        (name, value), *_ = self.event.items()
        if name == "statusUpdate":
            return f"{name} {value['status']['state']}"
        return name
