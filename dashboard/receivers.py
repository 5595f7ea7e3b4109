"""Broadcast what operators watch to the websocket group: audit events, run state, approvals.

Connected in `DashboardConfig.ready()`. Every broadcast happens after the commit (never a state
that may roll back) and is best-effort: a down channel layer is logged, never raised into the
gateway, the runner or the audit trail that triggered it. The caller only hands the message
over, as what it is built from; the process's publishing thread builds and publishes it
(mcplet_host.background).
"""

import asyncio
import copy
import logging
from collections.abc import Callable
from typing import NamedTuple

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_save

from agents.models import AgentRun
from dashboard.templatetags.dashboard_tags import trace_url
from held.models import Ceremony
from mcplet_host import background
from mcplet_host.signals import audit_recorded

log = logging.getLogger(__name__)

GROUP = "dashboard"
MESSAGE_TYPE = "dashboard.message"  # handled by DashboardConsumer.dashboard_message


# The in-memory layer (embedded mode) lives in one process, on the loop serving the websockets;
# the consumer records that loop, and messages are handed to it (an asyncio queue is not woken
# from another thread's loop).
serving_loop = None


class Later(NamedTuple):
    """A message built where it is published, not by the caller: `build(instance)`."""

    build: Callable
    instance: object

    def __call__(self):
        return self.build(self.instance)


def built(payloads):
    """The messages to send, each Later built; one that fails is logged and left out."""
    messages = []
    for payload in payloads:
        try:
            messages.append(payload() if isinstance(payload, Later) else payload)
        except Exception as exc:
            log.warning("dashboard message not built: %s: %s", type(exc).__name__, exc)
    return messages


def broadcast(payload):
    """Hand a message (a dict, or a Later) over to the group."""
    try:
        layer = get_channel_layer()
        if layer is None:
            return
        if not isinstance(layer, InMemoryChannelLayer):
            # Payloads queued together go in one group message: one PUBLISH for many.
            background.sends.gather(group_channel(), payload, layer_message(layer))
        elif serving_loop is not None and not serving_loop.is_closed():
            message = {"type": MESSAGE_TYPE, "payloads": built([payload])}
            asyncio.run_coroutine_threadsafe(layer.group_send(GROUP, message), serving_loop)
    except Exception as exc:  # the caller's work is done: never undo it for us
        log.warning("dashboard broadcast failed: %s: %s", type(exc).__name__, exc)


def group_channel():
    """The Redis channel of the pub/sub layer's group (channels_redis names it so; the live
    view's test over Redis shows a message published here reaching a socket)."""
    return f"{settings.CHANNEL_LAYERS['default']['CONFIG']['prefix']}__group__{GROUP}"


def layer_message(layer):
    """The group message of the payloads gathered, as the layer's group_send would publish it
    (published from the publishing thread, which runs no event loop for the layer's client)."""
    return lambda payloads: layer.serialize({"type": MESSAGE_TYPE, "payloads": built(payloads)})


def audit_payload(events):
    return {"type": "audit", "events": [{"seq": e.seq, **e.as_mgp()} for e in events]}


def run_payload(run):
    return {
        "type": "run",
        "run": {
            "id": str(run.pk),
            "short_id": str(run.pk)[:8],
            "agent": run.agent.agent_id,
            "status": run.status,
            "status_label": run.get_status_display(),
            "final": run.is_final,
            "context_id": run.context_id,
            "steps": run.steps,
            "tokens": run.total_tokens,
            "started_at": run.started_at.isoformat() if run.started_at else None,
            "finished_at": run.finished_at.isoformat() if run.finished_at else None,
            "error": (run.error or {}).get("message", "") if isinstance(run.error, dict) else "",
            "url": f"{url}#run-{run.pk}" if (url := trace_url(run.context_id)) else "",
        },
    }


def approval_payload(ceremony):
    # The ceremony page's URL carries its token: fine for this staff-only stream, which shows
    # what the staff-only approvals page shows, and never the arguments or an assertion.
    return {
        "type": "approval",
        "approval": {
            "id": ceremony.pk,
            "kind": ceremony.kind,
            "tool": ceremony.tool_name,
            "agent": ceremony.agent_id,
            "partner": ceremony.partner_id,
            "asked_by": ceremony.asked_by,
            "status": ceremony.status,
            "status_label": ceremony.outcome,
            "pending": ceremony.status == Ceremony.Status.PENDING,
            "prompt": ceremony.prompt_message,
            "created_at": ceremony.created_at.isoformat() if ceremony.created_at else None,
            "expires_at": ceremony.expires_at.isoformat() if ceremony.expires_at else None,
            "decided_by": ceremony.decided_by.get_username() if ceremony.decided_by_id else "",
            "url": ceremony.get_absolute_url(),
            # "" for a trace the trace page cannot show (`call_tool --trace demo`)
            "trace_url": trace_url(ceremony.trace_id),
        },
    }


def _after_commit(build, instance, *related):
    """Send the message once the commit is done, built from a copy of the instance as it was
    saved; the rows it names (`related`) are read here first, so that the publishing thread
    never queries the database."""
    try:
        for name in related:
            getattr(instance, name)
    except Exception as exc:  # never raised into the save
        log.warning("dashboard message for %r not built: %s", instance, exc)
        return
    later = Later(build, copy.copy(instance))
    # A closure, not functools.partial: Django's robust on_commit logs the callback's __qualname__.
    transaction.on_commit(lambda: broadcast(later), robust=True)


def audit_recorded_receiver(sender, events, **kwargs):
    # Already sent after the commit by mcplet_host.audit; one group message per batch.
    broadcast(Later(audit_payload, events))


def run_saved(sender, instance, raw=False, **kwargs):
    if not raw:
        _after_commit(run_payload, instance, "agent")


def ceremony_saved(sender, instance, raw=False, **kwargs):
    if not raw:
        _after_commit(approval_payload, instance, "decided_by")


def connect():
    audit_recorded.connect(audit_recorded_receiver, dispatch_uid="dashboard.audit")
    post_save.connect(run_saved, sender=AgentRun, dispatch_uid="dashboard.run")
    post_save.connect(ceremony_saved, sender=Ceremony, dispatch_uid="dashboard.ceremony")
