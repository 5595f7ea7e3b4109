"""A2A push notifications (A2A 1.0 §3.1.7–§3.1.10, §4.3.3): a partner's webhooks for its tasks.

A webhook is registered with its task (SendMessage's configuration) or later (Create). Each
audit commit that names a task's trace queues `a2a.push` for that task's webhooks: it records
what changed since each webhook was last told — the streams' own events (wire.changes), then
the final Task — as numbered deliveries, and POSTs them one at a time, in order, from a worker
(one process at a time per webhook: a lease). A failed POST is tried again after a backoff
(MCPLET_A2A_PUSH_BACKOFF × 2ⁿ seconds, MCPLET_A2A_PUSH_ATTEMPTS attempts in all) by a task
queued for then, never by a worker waiting; beat's sweep takes up what a lost task left.
Every registration, refusal, delivery and failure is audited under the task's trace."""

import re
import time
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from a2a import webhooks, wire
from a2a.models import PushConfig, PushDelivery
from agents.models import Agent
from mcplet_host import audit, kept
from mcplet_host.celery import app, enqueue
from mcplet_host.headers import TCHAR

PUSH_TASK = "a2a.push"
LEASE = 60  # seconds one process may send a webhook's deliveries (more than a POST's timeout)
AUDITED = "a2a.push."
SEEN_FOR = 1.0  # seconds a process trusts what it found of a trace's webhooks
LIVE_STATES = ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_AUTH_REQUIRED"]


def allowed_networks(partner):
    return webhooks.networks(partner.push_networks)


# What may go into the POST's headers as it is (RFC 9110 token and field value).
SCHEME = re.compile(rf"{TCHAR}{{1,50}}")
HEADER_VALUE = re.compile(r"[\x20-\x7e]{0,4096}")
# A path segment of the HTTP+JSON binding as it is (RFC 3986's unreserved; not "." or "..").
CONFIG_ID = re.compile(r"[A-Za-z0-9_~-][A-Za-z0-9._~-]{0,99}")


def check(partner, config, trace_id, path):
    """Refuse (wire.Unusable) an id or credentials unfit for the POST's headers, and (audited)
    a webhook URL this host would not POST to."""
    authentication = config.get("authentication") or {}
    if "id" in config and not CONFIG_ID.fullmatch(config["id"]):
        raise wire.Unusable(
            "A config id is 1 to 100 letters, digits and . _ ~ - (not first: .), as it goes in "
            "a URL's path.",
            f"{path}.id",
        )
    if authentication and not SCHEME.fullmatch(authentication["scheme"]):
        raise wire.Unusable("The scheme is an HTTP token, e.g. Bearer.", f"{path}.authentication")
    for name, value in (
        ("token", config.get("token", "")),
        ("credentials", authentication.get("credentials", "")),
    ):
        if not HEADER_VALUE.fullmatch(value):
            raise wire.Unusable(f"The {name} is at most 4096 printable ASCII characters.", path)
    try:
        webhooks.target(config.get("url"), allowed_networks(partner))
    except webhooks.Refused as exc:
        audit.record(
            AUDITED + "refused",
            actor_type=audit.ActorType.PARTNER,
            actor_id=partner.agent_id,
            result=audit.BLOCKED,
            trace_id=trace_id,
            details={"url": config.get("url"), "reason": str(exc)},
        )
        raise wire.Unusable(f"This webhook is refused: {exc}", f"{path}.url") from None


def register(partner, row, config, *, tenant="", baseline=None):
    """Store `config` (a TaskPushNotificationConfig `check` passed) for the task `row`,
    replacing one of the same id; the webhook hears the changes after `baseline` (default: the
    task's status now). Returns the TaskPushNotificationConfig."""
    trace_id = str(row.context_id)
    authentication = config.get("authentication") or {}
    stored, _ = PushConfig.objects.update_or_create(
        task=row,
        config_id=config.get("id") or str(uuid.uuid4()),
        defaults={
            "url": config["url"],
            "auth_scheme": authentication.get("scheme", ""),
            "sealed": {
                "token": config.get("token", ""),
                "credentials": authentication.get("credentials", ""),
            },
            "last_status": baseline or wire.task(row, artifacts=False)["status"],
        },
    )
    audit.record(
        AUDITED + "configured",
        actor_type=audit.ActorType.PARTNER,
        actor_id=partner.agent_id,
        trace_id=trace_id,
        details={"config": stored.config_id, "url": stored.url},
    )

    def queue():
        _seen.pop(trace_id, None)  # (what this process remembered is out of date)
        enqueue(PUSH_TASK, [stored.pk])

    transaction.on_commit(queue)
    return stored.as_wire(tenant)


def forget(partner, configs, config_id):
    """Delete a task's webhook (idempotent): nothing more is POSTed to it."""
    for config in configs.filter(config_id=config_id).select_related("task"):
        config.delete()
        audit.record(
            AUDITED + "deleted",
            actor_type=audit.ActorType.PARTNER,
            actor_id=partner.agent_id,
            trace_id=str(config.task.context_id),
            details={"config": config_id, "url": config.url},
        )


def on_audit(sender, events, **kwargs):
    """audit_recorded's receiver: queue `a2a.push` for the webhooks of the tasks whose traces
    the events name. Only a partner's task has webhooks, and every event of its workflow names
    the partner (Authority.audit_details); the host's own work costs nothing here, nor do this
    module's events (they name none)."""
    for trace in {item.trace_id for item in events if item.details.get("partner")}:
        for pk in _webhooks_of(trace):
            enqueue(PUSH_TASK, [pk])


_seen = {}  # trace → (until, its live webhooks' pks): a run's events come in bursts


def _webhooks_of(trace):
    """The live webhooks of the task whose trace is `trace`, as this process saw them at most
    SEEN_FOR seconds ago: a webhook registered meanwhile was queued by `register`, and a change
    this misses is recorded with the next one, or by the sweep."""
    now = time.monotonic()
    until, pks = _seen.get(trace, (0, ()))
    if until > now:
        return pks
    try:
        context_id = uuid.UUID(trace)
    except ValueError:
        return ()
    # The task's webhooks, live ones kept here: a kept read (an ORM query through the task and a
    # JSON key cost an approval five times as much CPU), and a task rarely has any.
    pks = tuple(
        config.pk
        for config in kept.rows(PushConfig, task__context_id=context_id)
        if isinstance(config.last_status, dict) and config.last_status.get("state") in LIVE_STATES
    )
    if len(_seen) > 10_000:
        _seen.clear()
    _seen[trace] = (now + SEEN_FOR, pks)
    return pks


def notify(config_pk):
    """`a2a.push`: record what changed, then POST what is due, in order (idempotent)."""
    config = PushConfig.objects.select_related("task").filter(pk=config_pk).first()
    if config is not None:
        record(config)
        deliver(config)


def record(config):
    """The task's changes since the webhook was last told, as its next deliveries."""
    try:
        with transaction.atomic():
            config = (
                PushConfig.objects.select_for_update(of=("self",))
                .select_related("task")
                .get(pk=config.pk)
            )
            task = wire.task(config.task)
            events = wire.changes(config.last_status, task)
            if events and task["status"]["state"] in wire.FINAL_STATES:
                events.append({"task": task})
            PushDelivery.objects.bulk_create(
                PushDelivery(config=config, sequence=config.next_sequence + n, event=event)
                for n, event in enumerate(events)
            )
            config.next_sequence += len(events)
            config.last_status = task["status"]
            config.save(update_fields=["next_sequence", "last_status"])
    except IntegrityError:  # another process recorded the same changes first
        return
    except PushConfig.DoesNotExist:  # deleted meanwhile
        return


def deliver(config):
    """POST the webhook's due deliveries in order while this process holds its lease."""
    while config.take_lease(LEASE):
        try:
            wait = _send_due(config)
        finally:
            config.release_lease()
        if wait is not None:
            later(config.pk, wait)
            return
        if not config.deliveries.filter(state=PushDelivery.State.PENDING).exists():
            return  # (else one was recorded after the last look: go on)


def later(config_pk, seconds):
    if not app.conf.task_always_eager:  # (eager: it would run now; the sweep takes it up)
        enqueue(PUSH_TASK, [config_pk], countdown=seconds)


def _send_due(config):
    """Send pending deliveries in order: None when none is left, else the seconds until the
    first one is due again."""
    partner = Agent.objects.filter(agent_id=config.task.sender_id).first()
    allowed = allowed_networks(partner) if partner else []
    while True:
        delivery = config.deliveries.filter(state=PushDelivery.State.PENDING).first()
        if delivery is None:
            return None
        now = timezone.now()
        if delivery.next_attempt_at > now:
            return (delivery.next_attempt_at - now).total_seconds()
        PushConfig.objects.filter(pk=config.pk).update(lease_until=now + timedelta(seconds=LEASE))
        error = _attempt(config, delivery, allowed)
        delivery.attempts += 1
        if error is None:
            delivery.state, delivery.ended_at = PushDelivery.State.DELIVERED, timezone.now()
        elif delivery.attempts >= settings.MCPLET_A2A_PUSH_ATTEMPTS:
            delivery.state, delivery.ended_at = PushDelivery.State.FAILED, timezone.now()
        else:
            backoff = settings.MCPLET_A2A_PUSH_BACKOFF * 2 ** (delivery.attempts - 1)
            delivery.next_attempt_at = timezone.now() + timedelta(seconds=backoff)
        delivery.last_error = (error or "")[:300]
        delivery.save()
        _audit(config, delivery, error)


def _attempt(config, delivery, allowed):
    """None when the webhook took the delivery (2xx), else what went wrong."""
    try:
        status = webhooks.post(config.url, allowed, delivery.event, config.headers())
    except webhooks.Refused as exc:
        return f"refused: {exc}"
    except Exception as exc:  # noqa: BLE001 — any failure of the POST is the webhook's
        return f"{type(exc).__name__}: {exc}"
    return None if 200 <= status < 300 else f"HTTP {status}"


def _audit(config, delivery, error):
    outcome = {
        PushDelivery.State.DELIVERED: "delivered",
        PushDelivery.State.FAILED: "given_up",
        PushDelivery.State.PENDING: "failed",
    }[delivery.state]
    audit.record(
        AUDITED + outcome,
        actor_id=config.task.sender_id,
        result=audit.SUCCESS if error is None else audit.FAILURE,
        trace_id=str(config.task.context_id),
        details={
            "config": config.config_id,
            "url": config.url,
            "sequence": delivery.sequence,
            "event": delivery.kind,
            "attempts": delivery.attempts,
            **({"error": error} if error else {}),
        },
    )


def sweep():
    """Beat: webhooks with a delivery due, or a task still live, are taken up again (a task
    lost with a worker, a change whose announcement was lost)."""
    due = PushConfig.objects.filter(
        deliveries__state=PushDelivery.State.PENDING,
        deliveries__next_attempt_at__lte=timezone.now(),
    )
    live = PushConfig.objects.filter(last_status__state__in=LIVE_STATES)
    for pk in sorted(
        set(due.values_list("pk", flat=True)) | set(live.values_list("pk", flat=True))
    ):
        enqueue(PUSH_TASK, [pk])
