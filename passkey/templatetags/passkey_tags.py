"""How a held call's arguments (or an agent's result) read to the person who approves them:
objects as definition lists, lists of objects as tables, other lists as bullets, text as
paragraphs that keep every line break and space. Everything is escaped; nothing is left out
(the exact JSON stays one click away on the pages that use this).

What the person reads is what runs: every text (`shown`, and each string and key `readable`
draws) is isolated from the text around it, a character `storable.unseen` names (a bidi
control, a zero-width space, a control but the line break and tab, ...) is shown as a token
such as ⟨U+202E⟩ instead of acting (a run of one as ⟨U+200B ×3000⟩), and a word mixing Latin,
Cyrillic or Greek letters (`exаmple` with a Cyrillic а) carries a notice naming the scripts."""

import re
import unicodedata
from collections import Counter
from itertools import groupby

from django import template
from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import mark_safe

from mcplet_host import storable

register = template.Library()

MAX_DEPTH = 8  # deeper than this (hostile or odd input) is shown as JSON
KEPT = "\n\t"  # controls that are shown for what they are (the text keeps its lines)
# Scripts whose letters look alike (a Cyrillic а, a Greek ο, a Latin a and o): one word
# mixing them is a lookalike of another word.
LOOKALIKE_SCRIPTS = {"LATIN", "CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC"}
WORD = re.compile(r"\w+")
NAMELESS = {"Cc": "a control character", "Co": "a private-use character", "Cn": "unassigned"}


@register.filter
def readable(value):
    return _render(value, 0)


@register.filter
def shown(value):
    """A server's or an agent's text (a message, a URL, a name) as it is: isolated (`<bdi>`),
    its unseen characters as tokens, a notice after it when a word mixes scripts."""
    text, notice = _marked(str(value))
    return format_html("<bdi>{}</bdi>{}", text, notice)


@register.filter
def plain(value):
    """`shown` where no markup can go (a title, an attribute, an option): the tokens as text."""
    return storable.marked(str(value), KEPT)


def _marked(text):
    """(`text` escaped with each unseen character as a token and each letter of a word's
    minority script marked, the mixed-script notice or "")."""
    odd, words = _mixed_scripts(text)
    pieces, index = [], 0
    for character, run in groupby(text):
        count = len(list(run))
        if character not in KEPT and storable.unseen(character):
            pieces.append(_token(character, count))
        elif index in odd:
            title = escape(unicodedata.name(character, ""))
            pieces.append(f'<span class="other-script" title="{title}">{escape(character)}</span>')
            pieces[-1] *= count  # the same letter again: all of a run are of its word
        else:
            pieces.append(escape(character * count))
        index += count
    if not words:
        return mark_safe("".join(pieces)), ""  # noqa: S308 (each piece escaped above)
    notice = format_html(
        '<span class="script-notice" role="note">mixed scripts: {}</span>',
        format_html_join("; ", "<bdi>{}</bdi> has {} letters", words),
    )
    return mark_safe("".join(pieces)), notice  # noqa: S308 (each piece escaped above)


def _token(character, count):
    name = unicodedata.name(character, NAMELESS.get(unicodedata.category(character), ""))
    title = f"{count} × {name}" if count > 1 else name
    label = storable.token(character, count)
    return f'<span class="hidden-char" title="{escape(title)}">{label}</span>'


def _mixed_scripts(text):
    """(the positions of letters outside their word's main script, [(word, "Latin and
    Cyrillic")] for each word mixing lookalike scripts)."""
    odd, words = set(), []
    for match in WORD.finditer(text):
        scripts = [_script(c) for c in match.group()]
        counts = Counter(s for s in scripts if s)
        if len(counts) < 2:
            continue
        main = counts.most_common(1)[0][0]
        odd.update(match.start() + i for i, s in enumerate(scripts) if s and s != main)
        named = " and ".join(s.title() for s in dict.fromkeys(s for s in scripts if s))
        words.append((match.group(), named))
    return odd, words


def _script(character):
    """LATIN, CYRILLIC, GREEK, ... for a letter of a lookalike script, else None."""
    if not character.isalpha():
        return None
    name = unicodedata.name(character, "").removeprefix("FULLWIDTH ")
    script = name.split(" ", 1)[0]
    return script if script in LOOKALIKE_SCRIPTS else None


def _render(value, depth):
    if depth > MAX_DEPTH:
        return format_html('<pre class="json">{}</pre>', _json(value))
    if isinstance(value, dict):
        if not value:
            return mark_safe('<span class="muted">(empty)</span>')
        items = ((_text(key), _render(item, depth + 1)) for key, item in value.items())
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
            return format_html('<p class="text">{}</p>', _text(value))
        return format_html('<span class="text">{}</span>', _text(value))
    return format_html("<code>{}</code>", _json(value))  # numbers, true, false, null


def _table(rows, depth):
    columns = list(dict.fromkeys(key for row in rows for key in row))
    head = format_html_join("", '<th scope="col">{}</th>', ((_text(c),) for c in columns))
    body = format_html_join(
        "",
        "<tr>{}</tr>",
        (
            (
                format_html_join(
                    "",
                    '<td data-label="{}">{}</td>',  # the column's name, shown above on a phone
                    ((plain(c), _render(row[c], depth + 1) if c in row else "") for c in columns),
                ),
            )
            for row in rows
        ),
    )
    return format_html(
        '<table class="value"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', head, body
    )


def _text(text):
    """A key's or a string's text marked, and its notice after it (`.text`, `dt` and `th`
    isolate it: the CSS, and a block)."""
    marked, notice = _marked(str(text))
    return format_html("{}{}", marked, notice)


def _json(value):
    return storable.shown_json(value, indent=2, default=str)
