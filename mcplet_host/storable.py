"""Values the host can store and sign. PostgreSQL refuses NUL in text and jsonb, UTF-8 cannot
encode a lone surrogate, JSON has no infinity, and recursive walkers (the JSON encoder,
jsonschema) break on deep nesting: hostile input is refused early with `problem()`, and what is
only recorded (the audit trail) is written out with `printable()` (issue 14)."""

import json
import math
import unicodedata
from itertools import groupby

from django.core.exceptions import ValidationError

MAX_DEPTH = 64  # far beyond any §18 payload or tool arguments, far below Python's recursion limit

# Unicode categories shown as something else, or not at all: controls (a line break), format
# characters (a right-to-left override, a zero-width space), line and paragraph separators,
# private use and unassigned code points. The bidi controls (U+202A-U+202E, U+2066-U+2069,
# U+200E/F, U+061C) are all format characters; they are named as well, to be sure.
UNSEEN = frozenset({"Cc", "Cf", "Co", "Cn", "Zl", "Zp"})
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def unseen(character):
    """Whether a person would not see `character` for what it is: it acts (a bidi control
    reorders text), shows nothing (a zero-width space) or shows as something else."""
    return character in BIDI_CONTROLS or unicodedata.category(character) in UNSEEN


def token(character, count=1):
    """How an unseen character reads instead: ⟨U+202E⟩, a run of them ⟨U+200B ×3000⟩."""
    code = f"U+{ord(character):04X}"
    return f"⟨{code} ×{count}⟩" if count > 1 else f"⟨{code}⟩"


def marked(text, kept="\n\t"):
    """`text` as plain text a person reads (an attribute, an option, a title): each run of an
    unseen character but those `kept` as its `token`."""
    return "".join(
        token(c, len(list(run))) if c not in kept and unseen(c) else "".join(run)
        for c, run in groupby(text)
    )


def text_problem(text):
    """Why the string `text` cannot be stored, or ""."""
    if "\x00" in text:
        return "it holds a NUL character"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "it holds a lone surrogate (not UTF-8)"
    return ""


def problem(value, max_depth=MAX_DEPTH):
    """(path, why) for the first part of the parsed JSON `value` that cannot be stored or
    signed, else None. Iterative: any depth is walked safely."""
    stack = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if depth > max_depth:
            return path, f"it is nested deeper than {max_depth} levels"
        if isinstance(item, str):
            why = text_problem(item)
            if why:
                return path, why
        elif isinstance(item, float) and not math.isfinite(item):
            return path, "it is not a finite number"
        elif isinstance(item, dict):
            for key, child in item.items():
                key = str(key)
                why = text_problem(key)
                if why:
                    return path, f"a key {why[3:]}"
                stack.append((child, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(item))
    return None


def validate(value):
    """A JSON model field's validator: a form refuses what could not be stored or shown again
    (NUL, a lone surrogate typed as `\\ud800`, `1e400`, deep nesting), instead of saving it."""
    found = problem(value)
    if found:
        path, why = found
        raise ValidationError(f"{f'At {path}: ' if path else ''}{why[0].upper()}{why[1:]}.")


def printable(value):
    """`value` with what the database cannot hold written out (NUL as `\\x00`, a lone surrogate
    as `\\udXXX`, an infinite number as text), for records of hostile input."""
    if isinstance(value, str):
        if text_problem(value):
            value = value.encode("utf-8", "backslashreplace").decode().replace("\x00", "\\x00")
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {printable(str(k)): printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [printable(item) for item in value]
    return value


def fitted(model, field_name, text):
    """`text` cut to the length of the model's column (PostgreSQL refuses more), marked "…"
    where it was cut."""
    limit = model._meta.get_field(field_name).max_length
    return text if len(text) <= limit else cut(text, limit - 1)


def cut(text, limit):
    """`text` past `limit` characters cut there, marked "…"."""
    return text if len(text) <= limit else f"{text[:limit]}…"


def json_text(value):
    """`value` as JSON text a person or a model reads: § and Japanese as written, not \\u
    escapes; escaped only where it holds what UTF-8 cannot encode (a lone surrogate)."""
    text = json.dumps(value, ensure_ascii=False)
    return json.dumps(value) if text_problem(text) else text


def shown_json(value, **options):
    """`value` as JSON a person reads to approve it: like `json.dumps(ensure_ascii=False)`, but
    every character `unseen` names (but the indent's line breaks) written as its `\\u` escape,
    so the text cannot reorder or hide itself."""
    text = json.dumps(value, ensure_ascii=False, **options)
    return "".join(_escaped(c) if c != "\n" and unseen(c) else c for c in text)


def _escaped(character):
    code = ord(character)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON writes the rest as a UTF-16 surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
