"""The host's Prometheus metrics (docs/metrics.md): every series is defined here, and each place
that counts calls one function below. Labels hold only bounded values — rule names, states,
codes, the names of accepted tools, pools and servers an operator configured — never ids,
arguments or anything a caller typed.

Several processes (`serve`'s web processes, Celery workers and their children) count into one
directory when PROMETHEUS_MULTIPROC_DIR is set (prometheus_client's multiprocess mode), and a
scrape of any web process reads all of it. Containers sharing that directory may reuse each
other's pids, so a process's files are named by host name and pid."""

import os
import re
import socket
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from prometheus_client import Counter, Histogram, disable_created_metrics, values
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROCESS_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
# prometheus_client splits file names on "_", so the host name must hold none.
HOST = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname()) or "host"


def _process():
    return f"{HOST}-{os.getpid()}"


if MULTIPROCESS_DIR:
    # A directory this process cannot write to would fail every count, and with it what counts
    # (an audit append): the process does not start instead.
    os.makedirs(MULTIPROCESS_DIR, exist_ok=True)
    if not os.access(MULTIPROCESS_DIR, os.W_OK | os.X_OK):
        raise ImproperlyConfigured(f"PROMETHEUS_MULTIPROC_DIR={MULTIPROCESS_DIR} is not writable.")
    # Before any series below is created: their values live in this process's files.
    values.ValueClass = values.MultiProcessValue(_process)

# A counter's `_created` series exist only in one process's registry (gone in multiprocess
# mode): none, so that `runhost` and `serve` expose the same series.
disable_created_metrics()

# OpenTelemetry's MCP semantic conventions' buckets for mcp.client.operation.duration.
MCP_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
# A person answers in seconds to hours.
PERSON_BUCKETS = (5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600)
HTTP_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

TOOL_CALLS = Counter(
    "mcplet_tool_calls",
    "Gateway tool calls by outcome: success or error (each tools/call sent, a retry too), "
    "refused, held (for a person).",
    ["tool", "pool", "outcome"],
)
REFUSALS = Counter(
    "mcplet_gateway_refusals", "Tool calls the gateway refused, by the rule broken.", ["rule"]
)
MCP_DURATION = Histogram(
    "mcp_client_operation_duration_seconds",
    "Duration of the MCP requests the host sent (OpenTelemetry's mcp.client.operation.duration).",
    ["mcp_method_name", "gen_ai_tool_name", "server", "error_type"],
    buckets=MCP_BUCKETS,
)
APPROVALS_DECIDED = Counter(
    "mcplet_approvals_decided",
    "Held calls decided: approved, rejected or expired.",
    ["kind", "decision"],
)
APPROVAL_WAIT = Histogram(
    "mcplet_approval_decision_seconds",
    "From holding a call to a person's decision on it.",
    ["kind", "decision"],
    buckets=PERSON_BUCKETS,
)
RUNS_FINISHED = Counter("mcplet_agent_runs_finished", "Agent runs that ended, by state.", ["state"])
BUS_MESSAGES = Counter(
    "mcplet_bus_messages",
    "Task requests on the local A2A bus: sent, delivered, refused.",
    ["outcome"],
)
PARTNER_REQUESTS = Counter(
    "mcplet_partner_requests",
    "Requests to the partner REST API by view, method and status.",
    ["view", "method", "status"],
)
AUDIT_EVENTS = Counter("mcplet_audit_events", "Events appended to the audit chain.", ["event_type"])
DISCOVERY_VERDICTS = Counter(
    "mcplet_discovery_verdicts",
    "MCPlet verdicts of each discovery: accepted, rejected, evicted.",
    ["server", "verdict"],
)


def tool_called(mcplet, outcome):
    """`mcplet` is an accepted tool, or None (a refused name that is none: not a label)."""
    tool, pool = (mcplet.name, mcplet.pool_name) if mcplet else ("", "")
    TOOL_CALLS.labels(tool, pool, outcome).inc()


def refused(rule, mcplet):
    REFUSALS.labels(rule).inc()
    tool_called(mcplet, "refused")


def mcp_call(mcplet, seconds, error_code=""):
    """One tools/call's duration; `error_code` is its envelope's, kept only if the host knows
    it (a server may send any code)."""
    from mcplet_host.gateway.envelopes import HOST_CODES
    from mcplets import ErrorCode  # (mcplets imports nothing from the host)

    known = not error_code or error_code in HOST_CODES or error_code in ErrorCode.__members__
    MCP_DURATION.labels(
        "tools/call", mcplet.name, mcplet.server.name, error_code if known else "_OTHER"
    ).observe(seconds)


def decided(ceremony, user):
    APPROVALS_DECIDED.labels(ceremony.kind, ceremony.status).inc()
    if user is not None:  # the time a person took, not the sweep's
        seconds = (ceremony.decided_at - ceremony.created_at).total_seconds()
        APPROVAL_WAIT.labels(ceremony.kind, ceremony.status).observe(max(seconds, 0))


def run_finished(state):
    RUNS_FINISHED.labels(state).inc()


def bus_message(outcome):
    BUS_MESSAGES.labels(outcome).inc()


def partner_request(view, method, status):
    method = method if method in HTTP_METHODS else "other"
    PARTNER_REQUESTS.labels(type(view).__name__, method, str(status)).inc()


def audited(events):
    for event in events:
        AUDIT_EVENTS.labels(event.event_type).inc()


def discovered(report):
    for verdict in ("accepted", "rejected", "evicted"):
        if count := getattr(report, verdict):
            DISCOVERY_VERDICTS.labels(report.server, verdict).inc(count)


class DatabaseCollector:
    """What the database knows at the scrape: held calls waiting for a person, and the runs
    still going, by state."""

    def collect(self):
        from django.apps import apps
        from django.db.models import Count

        ceremony = apps.get_model("held", "Ceremony")
        run = apps.get_model("agents", "AgentRun")
        pending = GaugeMetricFamily(
            "mcplet_approvals_pending", "Held calls waiting for a person, by kind.", labels=["kind"]
        )
        counted = dict(
            ceremony.objects.pending().order_by().values_list("kind").annotate(n=Count("pk"))
        )
        for kind in ceremony.Kind.values:
            pending.add_metric([kind], counted.get(kind, 0))
        yield pending
        runs = GaugeMetricFamily(
            "mcplet_agent_runs", "Agent runs not yet ended, by state.", labels=["state"]
        )
        going = (run.Status.RUNNING, run.Status.AWAITING_APPROVAL)
        counted = dict(
            run.objects.filter(status__in=going)
            .order_by()
            .values_list("status")
            .annotate(n=Count("pk"))
        )
        for state in going:
            runs.add_metric([state], counted.get(state, 0))
        yield runs


class Scrape:
    """What /metrics shows: this process's series, or every process's in multiprocess mode,
    then the database's."""

    def collect(self):
        from prometheus_client import REGISTRY

        source = MultiProcessCollector(None, MULTIPROCESS_DIR) if MULTIPROCESS_DIR else REGISTRY
        yield from source.collect()
        yield from DatabaseCollector().collect()


def remove_dead_files(directory=MULTIPROCESS_DIR):
    """The files of this host's ended processes, removed as a process group starts (`serve`,
    a Celery worker): a later process with the same pid must not add to a dead one's figures,
    and the directory must not grow with every restart. Another host's files are its own."""
    if not directory:
        return
    for path in Path(directory).glob("*.db"):
        host, _, pid = path.stem.rsplit("_", 1)[-1].rpartition("-")
        if host == HOST and pid.isdigit() and not _running(int(pid)):
            path.unlink(missing_ok=True)


def _running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's
    return True
