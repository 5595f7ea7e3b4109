"""The dashboard's read side: each page's aggregations, so the views stay thin."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.core.cache import cache
from django.db.models import Count, Max, Min, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from a2a.models import A2AMessage
from agents import toolset
from agents.models import Agent, AgentRun
from held.models import Ceremony
from mcplet_host import audit, config_audit, gateway
from mcplet_host.authority import Authority
from mcplet_host.models import AuditChainHead, AuditEvent
from pools.models import Mcplet, McpServer, Pool

ACTIVE = (AgentRun.Status.RUNNING, AgentRun.Status.AWAITING_APPROVAL)
FAILED = (AgentRun.Status.ERROR, AgentRun.Status.TIMEOUT, AgentRun.Status.PARTIAL)
FAILURE_WINDOW = timedelta(days=7)
DIRECTOR_CYCLE = "director.cycle."


# --- overview ---------------------------------------------------------------------------------


def overview():
    now = timezone.now()
    by_status = dict(Mcplet.objects.order_by().values_list("status").annotate(n=Count("id")))
    return {
        "servers": servers(),
        "mcplet_counts": [(s.value, s.label, by_status.get(s.value, 0)) for s in Mcplet.Status],
        "mcplet_total": sum(by_status.values()),
        "agents": Agent.objects.annotate(
            pool_count=Count("accessible_pools", distinct=True),
            active_runs=Count("runs", filter=Q(runs__status__in=ACTIVE), distinct=True),
        ),
        "pending": Ceremony.objects.pending().order_by("expires_at")[:10],
        "pending_count": Ceremony.objects.pending().count(),
        "active_runs": AgentRun.objects.filter(status__in=ACTIVE).select_related("agent")[:20],
        "failures": AgentRun.objects.filter(
            status__in=FAILED, finished_at__gte=now - FAILURE_WINDOW
        ).select_related("agent")[:10],
        "directors": director_schedules(now),
        "recent_events": AuditEvent.objects.all()[:12],
    }


def servers():
    return McpServer.objects.with_tool_counts()


@dataclass
class DirectorSchedule:
    agent: Agent
    cron: str = ""
    described: str = ""
    paused: bool = False
    last_run_at: datetime | None = None
    next_run_at: datetime | None = None
    last_cycle: AuditEvent | None = None

    @property
    def task(self):
        return self.agent.schedule


def director_schedules(now=None):
    now = now or timezone.now()
    found = []
    directors = Agent.objects.filter(kind=Agent.Kind.DIRECTOR).select_related(
        "schedule", "schedule__crontab", "schedule__interval"
    )
    for director in directors:
        row = DirectorSchedule(director)
        task = director.schedule
        if task is not None:
            row.paused, row.last_run_at = not task.enabled, task.last_run_at
            if task.crontab_id:
                c = task.crontab
                row.cron = f"{c.minute} {c.hour} {c.day_of_month} {c.month_of_year} "
                row.cron += f"{c.day_of_week} ({c.timezone})"
                row.described = c.human_readable
            elif task.interval_id:
                row.described = str(task.interval)
            row.next_run_at = next_run(task, now)
        # A handful of Directors at most: one indexed query each is fine.
        row.last_cycle = AuditEvent.objects.filter(
            event_type__startswith=DIRECTOR_CYCLE, actor_id=director.agent_id
        ).first()
        found.append(row)
    return found


def next_run(task, now):
    """When beat will next fire `task` (None if paused or spent); beat does the same sum."""
    if not task.enabled or (task.one_off and task.total_run_count):
        return None
    try:
        remaining = task.schedule.remaining_estimate(task.last_run_at or now)
    except (AttributeError, ValueError, NotImplementedError):  # clocked/solar: not estimated here
        return None
    # The schedule's own instant, not now + a float: round to the second it names.
    return max(now, now + remaining + timedelta(microseconds=500_000)).replace(microsecond=0)


# --- MCPlets ----------------------------------------------------------------------------------


def mcplets(status="", server="", name=""):
    rows = Mcplet.objects.select_related("server", "pool")
    if name:  # a part of the name or of the title, in any case
        rows = rows.filter(Q(name__icontains=name) | Q(title__icontains=name))
    if status:
        rows = rows.filter(status=status)
    if server:
        rows = rows.filter(server__name=server)
    return rows


# --- agents and grants ------------------------------------------------------------------------


@dataclass
class AgentGrants:
    agent: Agent
    granted: list  # one bool per pool, in the matrix's column order
    tools: list = field(default_factory=list)
    note: str = ""
    partner_views: list = field(default_factory=list)  # (internal agent, its tools for us)
    tool_mode: str = ""  # its level of MGP §16, the automatic one resolved
    visible: int = 0  # how many tools it may call, when discovery keeps them out of context


def grants(agents):
    """For a page of agents: the agent × pool matrix and what each agent's LLM is offered."""
    pools = list(Pool.objects.all())
    server_names = dict(McpServer.objects.values_list("pk", "name"))
    rows = []
    for agent in agents:
        held = {p.pk for p in agent.accessible_pools.all()}
        row = AgentGrants(agent, [p.pk in held for p in pools])
        if agent.kind == Agent.Kind.DIRECTOR:
            row.note = "A Director's LLM is offered no tools: it only picks one of its targets."
        elif agent.kind == Agent.Kind.EXTERNAL:
            # A partner has no LLM here: its tasks run on an internal agent, with the pools both
            # hold (gateway.tools_for with the partner), so that is what it can reach.
            row.note = "A partner's tasks run on the agents it may call, with the pools both hold."
            for target in agent.callable_agents.all():
                authority = Authority.of_partner(agent.agent_id)
                row.partner_views.append((target, _tools(target, authority, server_names)))
        else:
            visible = gateway.visible_to(agent)
            row.tool_mode = toolset.level(agent, visible)
            if row.tool_mode == Agent.ToolMode.ALL:
                row.tools = _tools(agent, Authority(), server_names)
            else:  # what is always in context, and how many more the model may find
                row.visible = visible.count()
                pinned = agent.pinned_tools if row.tool_mode == Agent.ToolMode.HYBRID else []
                row.tools = _tools(agent, Authority(), server_names, pinned)
        rows.append(row)
    return pools, rows


def _tools(agent, authority, server_names, only=None):
    if only is None:
        tools = list(gateway.tools_for(agent, authority))
    else:
        tools = list(gateway.visible_to(agent, authority).filter(name__in=only).order_by("name"))
    for tool in tools:
        tool.server_name = server_names.get(tool.server_id, "")
    return tools


# --- runs -------------------------------------------------------------------------------------


def contexts(agent="", active_only=False):
    """One row per A2A contextId (one delegation chain), newest first."""
    rows = A2AMessage.objects.order_by()
    if agent:
        rows = rows.filter(Q(sender_id=agent) | Q(recipient_id=agent))
    if active_only:
        live = AgentRun.objects.filter(status__in=ACTIVE).values_list("context_id", flat=True)
        rows = rows.filter(context_id__in=list(live))
    return (
        rows.values("context_id")
        .annotate(started=Min("created_at"), last=Max("created_at"), messages=Count("id"))
        .order_by("-started")
    )


def describe_contexts(rows):
    """Add the agents, runs and overall state to a page of `contexts()` rows."""
    ids = [row["context_id"] for row in rows]
    runs = {}
    for run in AgentRun.objects.filter(context_id__in=[str(i) for i in ids]).select_related(
        "agent"
    ):
        runs.setdefault(run.context_id, []).append(run)
    first = {}
    requests = A2AMessage.objects.filter(context_id__in=ids, type=A2AMessage.Type.TASK_REQUEST)
    for message in requests.order_by("created_at"):
        first.setdefault(message.context_id, message)
    for row in rows:
        row["runs"] = sorted(runs.get(str(row["context_id"]), []), key=lambda r: r.started_at)
        row["first"] = first.get(row["context_id"])
        row["state"] = _context_state(row["runs"])
        row["state_label"] = dict(AgentRun.Status.choices).get(row["state"], row["state"])
    return rows


def _context_state(runs):
    statuses = {r.status for r in runs}
    for status in (AgentRun.Status.AWAITING_APPROVAL, AgentRun.Status.RUNNING, *FAILED):
        if status in statuses:
            return status
    return runs[-1].status if runs else "refused"


def context_runs(context_id):
    return AgentRun.objects.filter(context_id=str(context_id)).select_related(
        "agent", "waiting_for"
    )


def unknown_outcomes(context_id):
    """The held calls of a context that were sent and got no answer: a person may run them
    again from their ceremony page."""
    return Ceremony.objects.filter(
        trace_id=str(context_id), status=Ceremony.Status.OUTCOME_UNKNOWN
    ).order_by("created_at")


def runs_in_progress():
    return AgentRun.objects.filter(status__in=ACTIVE).select_related("agent")


# --- approvals --------------------------------------------------------------------------------


def pending_approvals():
    return Ceremony.objects.pending().select_related("mcplet").order_by("expires_at")


def decided_approvals():
    return Ceremony.objects.exclude(status=Ceremony.Status.PENDING).select_related("decided_by")


# --- audit log --------------------------------------------------------------------------------

AUDIT_FILTERS = ("event_type", "agent", "tool", "partner", "since", "until")


def audit_events(params):
    """Audit events matching the page's filters (a dict of AUDIT_FILTERS); bad dates ignored."""
    events = AuditEvent.objects.all()
    if value := params.get("event_type"):
        # "director.cycle." or "mcplet.*" selects a family; a full type matches exactly;
        # "configuration" every change to what grants power.
        if value == "configuration":
            events = events.filter(config_audit.CONFIGURATION)
        elif value.endswith((".", "*")):
            events = events.filter(event_type__startswith=value.rstrip("*"))
        else:
            events = events.filter(event_type=value)
    if value := params.get("agent"):
        events = events.filter(Q(actor_id=value) | Q(details__agent=value))
    if value := params.get("tool"):
        events = events.filter(target_tool=value)
    if value := params.get("partner"):
        events = events.filter(
            Q(actor_type=audit.ActorType.PARTNER, actor_id=value) | Q(details__partner=value)
        )
    if since := _when(params.get("since")):
        events = events.filter(timestamp__gte=since)
    if until := _when(params.get("until")):
        events = events.filter(timestamp__lte=until)
    return events


def _when(text):
    """A datetime-local value (in TIME_ZONE) or ISO string; None if empty or unreadable."""
    if not text:
        return None
    try:
        parsed = parse_datetime(text)
    except ValueError:
        return None
    if parsed is not None and timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed)
    return parsed


def event_types():
    known = set(AuditEvent.EventType.values)
    used = AuditEvent.objects.order_by().values_list("event_type", flat=True).distinct()
    return ["configuration", *sorted(known | set(used))]


VERIFICATION_KEY = "dashboard:audit-verification"


@dataclass
class Verification:
    checked: int
    problem: str
    at: datetime
    head_seq: int

    @property
    def ok(self):
        return not self.problem


def chain_verification(force=False):
    """The chain check, remembered until new events arrive: verify_chain() reads every row, so
    the audit page must not run it on each view."""
    head = AuditChainHead.objects.filter(pk=1).values_list("last_seq", flat=True).first() or 0
    found = None if force else cache.get(VERIFICATION_KEY)
    if found is not None and found.head_seq == head:
        return found
    checked, problem = audit.verify_chain()
    found = Verification(checked, str(problem) if problem else "", timezone.now(), head)
    cache.set(VERIFICATION_KEY, found, 3600)
    return found


def jsonl_line(event):
    """One exported event: the MGP shape plus what verifies it offline (seq and the hashes)."""
    return {"seq": event.seq, **event.as_mgp(), "prev_hash": event.prev_hash, "hash": event.hash}
