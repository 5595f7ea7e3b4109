"""Manual host control (spec §3.3): each action changes one thing and is an audit event
`dashboard.<action>` naming the operator, in the same transaction as the change."""

import uuid
from dataclasses import dataclass, field

from django.contrib import messages
from django.db import transaction

from agents import ending
from agents.models import AgentRun
from mcplet_host import audit
from mcplet_host.celery import enqueue
from pools.discovery import discover
from pools.mcp_client import ServerUnreachable

DISCOVERY_TIMEOUT = 20  # seconds; the operator waits for the answer on the page


@dataclass
class Done:
    """What an action came to, for the page (a message) or a script (JSON)."""

    message: str
    level: int = messages.SUCCESS
    data: dict = field(default_factory=dict)

    @property
    def ok(self):
        return self.level < messages.WARNING


def _record(user, action, *, ok=True, result=None, **fields):
    audit.record(
        f"dashboard.{action}",
        actor_type=audit.ActorType.USER,
        actor_id=user.get_username(),
        result=result or (audit.SUCCESS if ok else audit.FAILURE),
        **fields,
    )


def refuse(user, action, permission):
    """An operator without the model permission an action needs tried it."""
    _record(user, action, result=audit.BLOCKED, details={"permission": permission})


def run_director(user, director):
    """Queue one cycle for a worker; the cycle's own audit event carries its outcome."""
    if not director.enabled:
        _record(
            user,
            "run_director",
            ok=False,
            details={"agent": director.agent_id, "reason": "disabled"},
        )
        return Done(f"{director.agent_id} is disabled: enable it first.", messages.ERROR)
    # Our own task id, so the audit event names the task and precedes whatever the cycle does.
    task_id = str(uuid.uuid4())
    with transaction.atomic():
        _record(user, "run_director", details={"agent": director.agent_id, "task": task_id})
        transaction.on_commit(
            lambda: enqueue("agents.run_director", [director.agent_id], task_id=task_id)
        )
    return Done(
        f"A cycle of {director.agent_id} is queued; its outcome appears below when it arrives.",
        data={"task": task_id, "director": director.agent_id},
    )


def set_schedule(user, director, enabled):
    task = director.schedule
    if task is None:
        return Done(f"{director.agent_id} has no schedule.", messages.ERROR)
    with transaction.atomic():
        task.enabled = enabled
        task.save(update_fields=["enabled"])  # django-celery-beat tells beat on save
        _record(
            user,
            "resume_schedule" if enabled else "pause_schedule",
            details={"agent": director.agent_id, "schedule": task.name},
        )
    return Done(f"Schedule of {director.agent_id} {'resumed' if enabled else 'paused'}.")


def set_agent_enabled(user, agent, enabled):
    with transaction.atomic():
        agent.enabled = enabled
        agent.save(update_fields=["enabled", "updated_at"])
        _record(
            user, "enable_agent" if enabled else "disable_agent", details={"agent": agent.agent_id}
        )
    return Done(f"{agent.agent_id} {'enabled' if enabled else 'disabled'}.")


def set_server_enabled(user, server, enabled):
    with transaction.atomic():
        server.enabled = enabled
        server.save(update_fields=["enabled"])
        _record(user, "enable_server" if enabled else "disable_server", target_server=server.name)
    return Done(f"Server {server.name} {'enabled' if enabled else 'disabled'}.")


def cancel_run(user, run):
    """Cancel an unfinished run (a call it waits for is rejected, nothing of it executes)."""
    details = {"agent": run.agent.agent_id, "run": str(run.pk), "status": run.status}
    with transaction.atomic():
        run = (
            AgentRun.objects.select_for_update(of=("self",))  # the run row only: joins are nullable
            .select_related("agent", "waiting_for")
            .get(pk=run.pk)
        )
        reason = f"Cancelled by {user.get_username()} from the dashboard."
        cancelled = ending.cancel(run, reason, by=user)
        _record(user, "cancel_run", ok=cancelled, trace_id=run.context_id, details=details)
    if not cancelled:
        return Done(f"The run had already ended ({run.get_status_display()}).", messages.WARNING)
    return Done(f"Run {str(run.pk)[:8]} of {details['agent']} cancelled.")


def discover_server(user, server):
    """Discover now, on the page: connect, list and validate (as the admin action does)."""
    try:
        report = discover(server, timeout=DISCOVERY_TIMEOUT)
    except ServerUnreachable as exc:
        _record(
            user,
            "discover_server",
            ok=False,
            target_server=server.name,
            details={"error": str(exc)},
        )
        return Done(f"{server.name} did not answer: {exc}", messages.ERROR)
    _record(
        user,
        "discover_server",
        target_server=server.name,
        details={
            "accepted": report.accepted,
            "rejected": report.rejected,
            "evicted": report.evicted,
        },
    )
    level = messages.WARNING if report.rejected else messages.SUCCESS
    return Done(str(report), level)


def audit_export(user, filters):
    """Exporting the trail is itself recorded: who took a copy, and of what."""
    _record(user, "export_audit", details={"filters": filters})
