"""Operator pages (spec §3.3): staff only, read from dashboard.queries, act via
dashboard.controls. Each response carries a CSP that allows this origin's files only."""

import json
from functools import wraps

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.paginator import Paginator
from django.http import Http404, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET, require_POST

from agents.models import Agent, AgentRun
from dashboard import controls, queries, trace
from mcplet_host import tracing
from pools.models import Mcplet, McpServer

CSP = (
    "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; frame-ancestors 'none'"
)
PER_PAGE = 25


def staff_only(view):
    """Anonymous → the admin login; signed in without staff rights → 403 (a control tried so is
    audited). Never cached, since the pages are live state; the CSP forbids inline script and
    any other origin."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        user = request.user
        if user.is_authenticated and user.is_active and user.is_staff:
            response = view(request, *args, **kwargs)
        else:
            if request.method == "POST":
                controls.refuse(user, view.__name__, "staff")
            if not user.is_authenticated:
                response = redirect_to_login(request.get_full_path(), reverse("admin:login"))
            else:
                response = render(request, "dashboard/forbidden.html", status=403)
        response.headers["Content-Security-Policy"] = CSP
        add_never_cache_headers(response)
        return response

    return wrapper


def needs_permission(permission):
    """A control changes a model: staff status only shows the pages, the change itself needs
    Django's permission on that model. Without it: a 403, and an audit event."""

    def decorate(view):
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            if not request.user.has_perm(permission):
                controls.refuse(request.user, view.__name__, permission)
                return render(request, "dashboard/forbidden.html", status=403)
            return view(request, *args, **kwargs)

        return wrapper

    return decorate


def _page(request, rows, per_page=PER_PAGE, param="page"):
    return Paginator(rows, per_page).get_page(request.GET.get(param))


def _done(request, done, fallback="dashboard:control"):
    """JSON for the page's script (it shows the outcome in place), else a message + redirect."""
    if "application/json" in request.headers.get("Accept", ""):
        return JsonResponse({"ok": done.ok, "message": done.message, **done.data})
    messages.add_message(request, done.level, done.message)
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        target = reverse(fallback)
    return redirect(target)


# --- pages ------------------------------------------------------------------------------------


@staff_only
@require_GET
def overview(request):
    return render(request, "dashboard/overview.html", {"nav": "overview", **queries.overview()})


@staff_only
@require_GET
def mcplets(request):
    status, server = request.GET.get("status", ""), request.GET.get("server", "")
    name = request.GET.get("name", "").strip()[:200]
    return render(
        request,
        "dashboard/mcplets.html",
        {
            "nav": "mcplets",
            "servers": queries.servers(),
            "page": _page(request, queries.mcplets(status, server, name), 50),
            "statuses": Mcplet.Status,
            "status": status,
            "server": server,
            "name": name,
        },
    )


@staff_only
@require_GET
def agents(request):
    page = _page(request, Agent.objects.prefetch_related("accessible_pools", "callable_agents"))
    pools, rows = queries.grants(page.object_list)
    return render(
        request,
        "dashboard/agents.html",
        {"nav": "agents", "page": page, "pools": pools, "rows": rows},
    )


@staff_only
@require_GET
def runs(request):
    agent, active = request.GET.get("agent", ""), request.GET.get("active") == "1"
    page = _page(request, queries.contexts(agent, active))
    queries.describe_contexts(page.object_list)
    return render(
        request,
        "dashboard/runs.html",
        {
            "nav": "runs",
            "page": page,
            "in_progress": queries.runs_in_progress(),
            "agent": agent,
            "active": active,
            "agent_ids": Agent.objects.values_list("agent_id", flat=True),
        },
    )


@staff_only
@require_GET
def run_trace(request, context_id):
    found = trace.build(context_id)
    if found is None:
        raise Http404("No run, message or audit event has this contextId.")
    runs = queries.context_runs(context_id)
    return render(
        request,
        "dashboard/trace.html",
        {
            "nav": "runs",
            "trace": found,
            "runs": runs,
            # The OpenTelemetry traces its runs started in, linked to the operator's viewer.
            "otel_traces": [
                (trace_id, tracing.trace_url(trace_id))
                for trace_id in dict.fromkeys(r.otel_trace_id for r in runs if r.otel_trace_id)
            ],
            "unknown_outcomes": queries.unknown_outcomes(context_id),
        },
    )


@staff_only
@require_GET
def approvals(request):
    return render(
        request,
        "dashboard/approvals.html",
        {
            "nav": "approvals",
            "pending": _page(request, queries.pending_approvals(), param="pending"),
            "history": _page(request, queries.decided_approvals()),
        },
    )


@staff_only
@require_GET
def audit(request):
    filters = {k: request.GET.get(k, "").strip() for k in queries.AUDIT_FILTERS}
    page = _page(request, queries.audit_events(filters), 50)
    return render(
        request,
        "dashboard/audit.html",
        {
            "nav": "audit",
            "page": page,
            "filters": filters,
            "filtered": any(filters.values()),
            "event_types": queries.event_types(),
            "verification": queries.chain_verification(),
        },
    )


@staff_only
@require_GET
def audit_export(request):
    filters = {k: request.GET.get(k, "").strip() for k in queries.AUDIT_FILTERS}
    controls.audit_export(request.user, {k: v for k, v in filters.items() if v})
    # Oldest first, streamed: a long trail never sits in memory whole.
    events = queries.audit_events(filters).order_by("seq").iterator(chunk_size=2000)
    lines = (json.dumps(queries.jsonl_line(e), ensure_ascii=False) + "\n" for e in events)
    response = StreamingHttpResponse(lines, content_type="application/jsonl; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.jsonl"'
    return response


@staff_only
@require_POST
def audit_verify(request):
    found = queries.chain_verification(force=True)
    level = messages.SUCCESS if found.ok else messages.ERROR
    messages.add_message(
        request, level, f"Checked {found.checked} events: {found.problem or 'the chain is intact'}."
    )
    return redirect("dashboard:audit")


@staff_only
@require_GET
def control(request):
    return render(
        request,
        "dashboard/control.html",
        {
            "nav": "control",
            "directors": queries.director_schedules(),
            "agents": Agent.objects.all(),
            "servers": McpServer.objects.with_tool_counts(),
            "in_progress": queries.runs_in_progress(),
        },
    )


@staff_only
@require_GET
def writing_an_mcplet(request):
    """docs/writing-an-mcplet.md as a page: servers whose tools are rejected link here, and an
    operator's browser cannot open a path in the repository."""
    from markdown_it import MarkdownIt  # this page only

    text = (settings.BASE_DIR / "docs" / "writing-an-mcplet.md").read_text(encoding="utf-8")
    # html=False: raw HTML in the file comes out escaped, and markdown-it refuses javascript:
    # links, so the output is safe to insert as is.
    html = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
    guide = mark_safe(html)  # noqa: S308
    return render(request, "dashboard/guide.html", {"nav": "mcplets", "guide": guide})


# --- actions (POST, CSRF-checked, audited in dashboard.controls) ------------------------------


def _flag(request):
    return request.POST.get("enabled") == "1"


@staff_only
@require_POST
@needs_permission("agents.change_agent")
def run_director(request, pk):
    director = get_object_or_404(Agent, pk=pk, kind=Agent.Kind.DIRECTOR)
    return _done(request, controls.run_director(request.user, director))


@staff_only
@require_POST
@needs_permission("django_celery_beat.change_periodictask")
def set_schedule(request, pk):
    director = get_object_or_404(Agent.objects.select_related("schedule"), pk=pk)
    return _done(request, controls.set_schedule(request.user, director, _flag(request)))


@staff_only
@require_POST
@needs_permission("agents.change_agent")
def set_agent_enabled(request, pk):
    agent = get_object_or_404(Agent, pk=pk)
    return _done(request, controls.set_agent_enabled(request.user, agent, _flag(request)))


@staff_only
@require_POST
@needs_permission("pools.change_mcpserver")
def set_server_enabled(request, pk):
    server = get_object_or_404(McpServer, pk=pk)
    return _done(request, controls.set_server_enabled(request.user, server, _flag(request)))


@staff_only
@require_POST
@needs_permission("pools.change_mcpserver")
def discover_server(request, pk):
    server = get_object_or_404(McpServer, pk=pk)
    return _done(request, controls.discover_server(request.user, server), "dashboard:mcplets")


@staff_only
@require_POST
@needs_permission("agents.change_agentrun")
def cancel_run(request, pk):
    run = get_object_or_404(AgentRun.objects.select_related("agent"), pk=pk)
    return _done(request, controls.cancel_run(request.user, run))
