"""How a held call's arguments (or an agent's result) read to the person who approves them:
objects as definition lists, lists of objects as tables, other lists as bullets, text as
paragraphs that keep every line break and space. Everything is escaped; nothing is left out
(the exact JSON stays one click away on the pages that use this)."""

import json

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

register = template.Library()

MAX_DEPTH = 8  # deeper than this (hostile or odd input) is shown as JSON


@register.filter
def readable(value):
    return _render(value, 0)


def _render(value, depth):
    if depth > MAX_DEPTH:
        return format_html('<pre class="json">{}</pre>', _json(value))
    if isinstance(value, dict):
        if not value:
            return mark_safe('<span class="muted">(empty)</span>')
        items = ((key, _render(item, depth + 1)) for key, item in value.items())
        return format_html(
            '<dl class="value">{}</dl>', format_html_join("", "<dt>{}</dt><dd>{}</dd>", items)
        )
    if isinstance(value, list):
        if not value:
            return mark_safe('<span class="muted">(none)</span>')
        if all(isinstance(item, dict) for item in value):
            return _table(value, depth)
        items = ((_render(item, depth + 1),) for item in value)
        return format_html('<ul class="value">{}</ul>', format_html_join("", "<li>{}</li>", items))
    if isinstance(value, str):
        if "\n" in value:
            return format_html('<p class="text">{}</p>', value)
        return format_html('<span class="text">{}</span>', value)
    return format_html("<code>{}</code>", _json(value))  # numbers, true, false, null


def _table(rows, depth):
    columns = list(dict.fromkeys(key for row in rows for key in row))
    head = format_html_join("", '<th scope="col">{}</th>', ((c,) for c in columns))
    body = format_html_join(
        "",
        "<tr>{}</tr>",
        (
            (
                format_html_join(
                    "",
                    '<td data-label="{}">{}</td>',  # the column's name, shown above on a phone
                    ((c, _render(row[c], depth + 1) if c in row else "") for c in columns),
                ),
            )
            for row in rows
        ),
    )
    return format_html(
        '<table class="value"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', head, body
    )


def _json(value):
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)
