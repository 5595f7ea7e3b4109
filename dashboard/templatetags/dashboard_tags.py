import json
import uuid

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html

register = template.Library()


@register.filter
def pretty_json(value):
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


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
