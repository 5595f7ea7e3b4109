import json
import uuid

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html

register = template.Library()

# What an operator can do about a failure, by its code (§9.1 and the host's X_ codes).
NEXT_STEPS = {
    "SERVICE_UNAVAILABLE": "Start what did not answer, or correct the address in the message "
    "(an MCP server's URL or command is in admin → MCP servers).",
    "AUTH_REQUIRED": "The passkey assertion never reached the MCPlet: approve a new call.",
    "AUTH_FAILED": "The host did not verify the approval (the reason is in the message): check "
    "the server's verify-assertion token and PASSKEY_ORIGIN.",
    "X_ACCESS_DENIED": "Grant the pool to the agent (admin → Agents), or enable the agent.",
    "NOT_FOUND": "The tool is not available: see its state on the MCPlets page.",
    "RATE_LIMITED": "The pool's rate limit was reached: retry later, or raise it (admin → Pools).",
    "X_DOMAIN_NOT_ALLOWED": "Add the domain to the pool's allowlist if it should be reachable.",
    "VALIDATION_ERROR": "The arguments break the tool's input schema: see the message.",
    "X_INVALID_RESULT": "The MCP server's result breaks its declared schema: fix the MCPlet.",
    "X_RESULT_TOO_LARGE": "It ran, and its result was past MCPLET_MAX_RESULT or "
    "MCPLET_MAX_MESSAGE_BYTES: ask the tool for less, or raise the limit.",
    "UNKNOWN_ERROR": "See the MCP server's own log for the cause.",
    "X_LLM_ERROR": "Check the agent's model and its provider's API key (admin → Agents).",
    "X_STEP_LIMIT": "Raise the agent's max steps (admin → Agents), or narrow its task.",
    "X_TOKEN_BUDGET": "Raise the agent's token budget (admin → Agents).",
    "X_LLM_INCOMPLETE": "The model stopped mid-answer: raise its output limit, or narrow the "
    "task (a filtered answer: see the provider's policy).",
    "X_OUTCOME_UNKNOWN": "It may have run: check the MCP server (or what it acts on) before "
    "running it again; the host will not re-send it.",
}
VERIFY_STEP = (
    "The MCPlet could not ask the host to verify the passkey: the host must answer at that URL "
    "(the server's MCPLET_VERIFY_URL, in admin → MCP servers), and be running."
)


@register.filter
def pretty_json(value):
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


@register.filter
def next_step(error):
    """A short hint for an error ({code, message}): what to check or change next."""
    if not isinstance(error, dict):
        return ""
    code, message = str(error.get("code") or ""), str(error.get("message") or "")
    if code == "SERVICE_UNAVAILABLE" and "verify-assertion" in message:
        return VERIFY_STEP
    return NEXT_STEPS.get(code, "")


@register.filter
def seconds_between(end, start):
    if not (end and start):
        return ""
    seconds = (end - start).total_seconds()
    return f"{seconds:.1f} s" if seconds < 120 else f"{int(seconds // 60)} min"


@register.simple_tag(takes_context=True)
def page_query(context, param, number):
    """The current query string with one page parameter set (pages keep the filters)."""
    query = context["request"].GET.copy()
    query[param] = number
    return "?" + query.urlencode()


@register.simple_tag
def when(value):
    """A <time> element: the server's TIME_ZONE as text, the exact instant for live.js, which
    shows it (like the live rows it adds) in the browser's local time."""
    if not value:
        return "—"
    local = timezone.localtime(value)
    return format_html(
        '<time datetime="{}">{}</time>', value.isoformat(), local.strftime("%Y-%m-%d %H:%M:%S")
    )


@register.filter
def trace_url(trace_id):
    """The trace page of a contextId, or "" for a trace id that is not one."""
    try:
        return reverse("dashboard:trace", args=[uuid.UUID(str(trace_id))])
    except (ValueError, NoReverseMatch):
        return ""
