"""Values the host can store and sign. PostgreSQL refuses NUL in text and jsonb, UTF-8 cannot
encode a lone surrogate, JSON has no infinity, and recursive walkers (the JSON encoder,
jsonschema) break on deep nesting: hostile input is refused early with `problem()`, and what is
only recorded (the audit trail) is written out with `printable()` (issue 14)."""

import json
import math

from django.core.exceptions import ValidationError

MAX_DEPTH = 64  # far beyond any §18 payload or tool arguments, far below Python's recursion limit


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
