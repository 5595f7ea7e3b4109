"""One contextId's A2A trace as a sequence diagram, laid out here and drawn as SVG by the
`dashboard/includes/sequence.svg` template (server-side, so it needs no script and no library).

Steps come from what the host stored: A2A messages (requests, responses), the audit trail (tool
calls, refusals, approvals, Director cycles) and the runs (their transcripts give each tool call's
arguments and envelope). Rows follow time; the left column shows the offset from the first step.
"""

import json
from collections import defaultdict, deque
from dataclasses import dataclass, field
from datetime import datetime

from a2a.models import A2AMessage
from agents.models import AgentRun
from held.models import Ceremony
from mcplet_host.models import AuditEvent

LEFT, TOP, ROW, BOTTOM = 84, 64, 44, 28
# A lane is as wide as its name needs, within these bounds, so a trace with eight MCP servers
# still mostly fits a laptop's screen (the rest scrolls); ~7 px per character at 12 px.
LANE_MIN, LANE_MAX, CHAR_W, PADDING = 120, 190, 7, 24
APPROVER = "approver"
HOST = "host"
TOOL_EVENTS = {AuditEvent.EventType.TOOL_EXECUTED, AuditEvent.EventType.TOOL_BLOCKED}
DECISIONS = {AuditEvent.EventType.PERMISSION_GRANTED, AuditEvent.EventType.PERMISSION_DENIED}
REQUESTED = "mcplet.approval.requested"
# Already drawn by another step (the response message, the approval arrow).
SKIPPED = {"agent.run.finished", "agent.run.awaiting_approval"}


@dataclass
class Lane:
    key: str
    label: str
    kind: str  # agent | approver | server | host
    seen: int = 0  # order of first appearance, within its kind
    x: float = 0

    @property
    def width(self):
        return max(LANE_MIN, min(LANE_MAX, CHAR_W * len(self.label) + 2 * PADDING))

    @property
    def box_w(self):
        return self.width - PADDING

    @property
    def box_x(self):
        return self.x - self.box_w / 2

    @property
    def short_label(self):
        return _shorten(self.label, self.box_w // CHAR_W)


@dataclass
class Step:
    at: datetime
    kind: str  # request | response | tool | approval | decision | note
    source: str
    target: str
    label: str
    detail: str = ""
    status: str = "ok"  # ok | error | pending | blocked
    payload: dict = field(default_factory=dict)
    number: int = 0
    offset: str = ""
    y: float = 0
    x1: float = 0
    x2: float = 0
    note_w: float = 0  # a note's box: its lane's

    @property
    def is_note(self):
        return self.source == self.target

    @property
    def mid_x(self):
        return (self.x1 + self.x2) / 2

    @property
    def short_label(self):
        room = self.note_w if self.is_note else max(14 * CHAR_W, abs(self.x2 - self.x1))
        return _shorten(self.label, int(room // CHAR_W))

    @property
    def note_x(self):
        return self.x1 - self.note_w / 2

    @property
    def payload_json(self):
        return json.dumps(self.payload, indent=2, ensure_ascii=False, default=str)

    @property
    def summary(self):
        arrow = self.source if self.is_note else f"{self.source} → {self.target}"
        return f"{arrow}: {self.label}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class Activation:
    lane: Lane
    y1: float
    y2: float
    status: str

    @property
    def x(self):
        return self.lane.x - 5

    @property
    def height(self):
        return self.y2 - self.y1


@dataclass
class Trace:
    context_id: str
    lanes: list
    steps: list
    activations: list
    width: int = 0
    height: int = 0

    @property
    def lifeline_end(self):
        return self.height - BOTTOM / 2


def build(context_id):
    """The trace of one contextId (None if the host knows nothing of it)."""
    context_id = str(context_id)
    messages = list(A2AMessage.objects.filter(context_id=context_id).order_by("created_at", "pk"))
    events = list(AuditEvent.objects.filter(trace_id=context_id).order_by("seq"))
    runs = list(AgentRun.objects.filter(context_id=context_id).select_related("agent", "request"))
    if not (messages or events or runs):
        return None
    ceremonies = {c.token[:8]: c for c in Ceremony.objects.filter(trace_id=context_id)}
    calls = _calls_by_agent(runs)
    steps = [*_message_steps(messages), *_event_steps(events, ceremonies, calls)]
    steps.sort(key=lambda s: s.at)
    return _layout(context_id, steps, runs, messages)


# --- steps ------------------------------------------------------------------------------------


def _message_steps(messages):
    requests = {m.message_id: m for m in messages if m.type == A2AMessage.Type.TASK_REQUEST}
    for m in messages:
        payload = m.body.get("payload") or {}
        if m.type == A2AMessage.Type.TASK_REQUEST:
            parameters = payload.get("parameters") or {}
            label = str(parameters.get("instruction") or ", ".join(parameters) or "task")
            status = "error" if m.state == A2AMessage.State.REFUSED else "ok"
            try:
                acts_for = m.authority.describe()
            except ValueError:  # not one the host wrote: its delivery was refused
                acts_for = "an unreadable provenance"
            yield Step(
                m.created_at,
                "request",
                m.sender_id,
                m.recipient_id,
                label,
                detail=" · ".join(filter(None, ["task request", acts_for])),
                status=status,
                payload=m.body,
            )
            continue
        request = requests.get(m.reply_to)
        took = _duration(m.created_at - request.created_at) if request else ""
        error = (payload.get("error") or {}).get("code", "")
        status = {"success": "ok", "awaiting_approval": "pending"}.get(m.status, "error")
        label = " ".join(filter(None, [m.status or "response", error]))
        yield Step(
            m.created_at,
            "response",
            m.sender_id,
            m.recipient_id,
            label,
            detail=took,
            status=status,
            payload=m.body,
        )


def _event_steps(events, ceremonies, calls):
    held = {}  # ceremony token prefix → the call it holds
    for e in events:
        details, actor = e.details or {}, e.actor_id
        payload = {"audit": {"seq": e.seq, **e.as_mgp()}}
        ceremony = ceremonies.get(details.get("ceremony", ""))
        if e.event_type in SKIPPED:
            continue
        if e.event_type == REQUESTED:
            if ceremony is not None and ceremony.kind == Ceremony.Kind.TOOL_CALL:
                held[details.get("ceremony")] = _pop(calls, actor, e.target_tool)
            payload["ceremony"] = _ceremony(ceremony)
            label = f"approve {e.target_tool}?"
            if ceremony is not None and ceremony.kind == Ceremony.Kind.RESULT:
                label = ceremony.prompt_message or e.target_tool
            enforcement = ceremony.enforcement if ceremony else ""
            yield Step(
                e.timestamp,
                "approval",
                actor,
                APPROVER,
                label,
                detail=enforcement,
                status="pending",
                payload=payload,
            )
        elif e.event_type in DECISIONS and ceremony is not None:
            payload["ceremony"] = _ceremony(ceremony)
            who = details.get("status", "")
            if e.actor_type == "user" and e.actor_id:
                who += f" by {e.actor_id}"
            waited = _duration(e.timestamp - ceremony.created_at)
            ok = e.event_type == AuditEvent.EventType.PERMISSION_GRANTED
            yield Step(
                e.timestamp,
                "decision",
                APPROVER,
                ceremony.agent_id,
                who,
                detail=waited,
                status="ok" if ok else "blocked",
                payload=payload,
            )
        elif e.event_type in TOOL_EVENTS:
            call = held.get(details.get("ceremony")) or _pop(calls, actor, e.target_tool)
            if call:
                payload["call"] = call
            if e.event_type == AuditEvent.EventType.TOOL_BLOCKED:
                reason = details.get("code") or "refused"
                yield Step(
                    e.timestamp,
                    "note",
                    actor,
                    actor,
                    f"✕ {e.target_tool}: {reason}",
                    detail=details.get("message", ""),
                    status="blocked",
                    payload=payload,
                )
                continue
            took = details.get("duration_ms")
            detail = f"{took:g} ms" if isinstance(took, int | float) else ""
            status = "error" if e.result != "SUCCESS" else "ok"
            if status == "error":  # it ran and failed: say so, and why
                failure = [details.get("code"), details.get("message")]
                detail = " · ".join(filter(None, ["failed", *failure, detail]))
            yield Step(
                e.timestamp,
                "tool",
                actor,
                f"server:{e.target_server}",
                e.target_tool,
                detail=detail,
                status=status,
                payload=payload,
            )
        else:
            lane = {"agent": actor, "user": APPROVER}.get(e.actor_type, HOST)
            label = e.event_type.removeprefix("mcplet.")
            if e.event_type.startswith("director.cycle."):
                label = f"cycle {e.event_type.rsplit('.', 1)[-1]}"
            status = {"SUCCESS": "ok", "PENDING": "pending"}.get(e.result, "error")
            yield Step(
                e.timestamp,
                "note",
                lane,
                lane,
                label,
                detail=str(details.get("reason", "")),
                status=status,
                payload=payload,
            )


def _calls_by_agent(runs):
    """(agent, tool) → the calls its runs made, in order: the LLM's tool calls with their
    envelopes, then the dispatched actions with their outcomes."""
    calls = defaultdict(deque)
    for run in sorted(runs, key=lambda r: r.started_at):
        agent = run.agent.agent_id
        answers = {
            m.get("tool_call_id"): m.get("content")
            for m in run.transcript
            if m.get("role") == "tool"
        }
        for message in run.transcript:
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                calls[(agent, function.get("name"))].append(
                    {
                        "run": str(run.pk),
                        "arguments": _json(function.get("arguments")),
                        "envelope": _json(answers.get(call.get("id"))),
                    }
                )
        for action in run.actions or []:
            calls[(agent, action.get("tool"))].append(
                {
                    "run": str(run.pk),
                    "surface": "app",
                    "arguments": action.get("arguments"),
                    "why": action.get("why", ""),
                    "envelope": action.get("outcome"),
                }
            )
    return calls


def _pop(calls, agent, tool):
    queue = calls.get((agent, tool))
    return queue.popleft() if queue else None


def _json(text):
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _ceremony(ceremony):
    if ceremony is None:
        return None
    return {
        "kind": ceremony.kind,
        "tool": ceremony.tool_name,
        "agent": ceremony.agent_id,
        "asked_by": ceremony.asked_by,
        "arguments": ceremony.arguments,
        "prompt": ceremony.prompt_message,
        "enforcement": ceremony.enforcement,
        "status": ceremony.status,
        "decided_by": ceremony.decided_by.get_username() if ceremony.decided_by else None,
        "decided_at": ceremony.decided_at,
        "result": ceremony.result,
    }


def _duration(delta):
    seconds = delta.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes} min {seconds} s"


# --- layout -----------------------------------------------------------------------------------


def _layout(context_id, steps, runs, messages):
    lanes = _lanes(steps)
    by_key = {lane.key: lane for lane in lanes}
    start = steps[0].at if steps else None
    for number, step in enumerate(steps, 1):
        step.number, step.y = number, TOP + ROW * number - ROW // 3
        step.x1, step.x2 = by_key[step.source].x, by_key[step.target].x
        step.note_w = by_key[step.source].box_w
        step.offset = f"+{(step.at - start).total_seconds():.2f} s"
    height = TOP + ROW * (len(steps) + 1) + BOTTOM
    right = lanes[-1].x + lanes[-1].width / 2 if lanes else LEFT
    trace = Trace(context_id, lanes, steps, [], int(right) + 16, int(height))
    trace.activations = _activations(steps, runs, messages, by_key, height)
    return trace


def _lanes(steps):
    order = {"agent": 0, "approver": 1, "server": 2, "host": 3}
    seen = {}
    for step in steps:
        for key in (step.source, step.target):
            if key not in seen:
                seen[key] = _lane(key, len(seen))
    lanes = sorted(seen.values(), key=lambda lane: (order[lane.kind], lane.seen))
    left = LEFT
    for lane in lanes:
        lane.x, left = left + lane.width / 2, left + lane.width
    return lanes


def _shorten(text, room):
    return text if len(text) <= room else text[: max(1, room - 1)] + "…"


def _lane(key, seen_at):
    if key == APPROVER:
        return Lane(key, "people", "approver", seen_at)  # approvers, operators
    if key == HOST:
        return Lane(key, "host", "host", seen_at)
    if key.startswith("server:"):
        return Lane(key, key.removeprefix("server:") or "(no server)", "server", seen_at)
    return Lane(key, key, "agent", seen_at)


def _activations(steps, runs, messages, lanes, height):
    """A bar on the agent's lifeline from the task request a run answers to its response."""
    row_of = {}
    for step in steps:
        if step.kind in ("request", "response"):
            row_of[step.payload.get("messageId")] = step
    responses = {m.reply_to: m for m in messages if m.type == A2AMessage.Type.TASK_RESPONSE}
    bars = []
    for run in runs:
        if run.request is None or run.agent.agent_id not in lanes:
            continue
        begin = row_of.get(str(run.request.message_id))
        response = responses.get(run.request.message_id)
        end = row_of.get(str(response.message_id)) if response else None
        if begin is None:
            continue
        y2 = end.y if end else height - BOTTOM
        status = "pending" if not run.is_final else ("ok" if run.status == "success" else "error")
        bars.append(Activation(lanes[run.agent.agent_id], begin.y, y2, status))
    return bars
