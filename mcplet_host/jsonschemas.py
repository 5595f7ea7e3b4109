"""JSON Schemas the host did not write — an MCP server's inputSchema and result schemas, an
operator's agent schemas — used without trusting them: a `$ref` is resolved inside the schema
only (jsonschema's default would fetch any URL it names, with no timeout), and a schema that
cannot check a value (a `$ref` loop, `"type": 5`, a broken pattern) is refused, never raised
out of a check. Discovery rejects such a tool (`problem`); a check that meets one anyway
answers `Unusable` (fail closed)."""

import functools
import json

from django.core.exceptions import ValidationError
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.validators import validator_for
from referencing import Registry

NOWHERE = Registry()  # no resource but the schema itself, and no retrieval of any other


class Unusable(Exception):
    """The schema cannot check the value; the message says why."""


def problem(schema):
    """Why `schema` cannot be used to check values, or "" (a sentence's end: "it …"). Kept by
    the schema's text: the meta-schema's check costs ~0.8 ms, and a rediscovery (the watcher,
    beat's sweep) sees the same schemas again."""
    if not isinstance(schema, dict | bool):
        return "is not a JSON Schema object"
    try:
        text = json.dumps(schema, sort_keys=True)
    except (ValueError, TypeError, RecursionError):
        return _problem(schema)
    return _kept_problem(text) if len(text) <= KEPT_SIZE else _problem(schema)


KEPT_SIZE = 16 * 1024  # a server's huge schemas are checked each time, not kept in memory


@functools.lru_cache(maxsize=4096)
def _kept_problem(text):
    return _problem(json.loads(text))


def _problem(schema):
    try:
        validator_for(schema, Draft202012Validator).check_schema(schema)
    except SchemaError as exc:
        return f"is not a valid JSON Schema ({exc.message})"
    except Exception as exc:  # a hostile schema can break the meta-schema's own check
        return f"cannot be checked as a JSON Schema ({type(exc).__name__})"
    if outside := _reference_outside(schema):
        return f"refers outside itself ({outside!r}): the host fetches no schema"
    try:
        first_error(schema, {})  # a $ref loop shows on any value
    except Unusable as exc:
        return str(exc)
    return ""


def validate(schema):
    """A model field's validator: a schema an operator types must be able to check values."""
    if schema and (why := problem(schema)):
        raise ValidationError(f"This JSON Schema {why}.")


def first_error(schema, value):
    """The most relevant error of `value` against `schema`, or None; raises `Unusable`."""
    try:
        validator = validator_for(schema, Draft202012Validator)(schema, registry=NOWHERE)
        return best_match(validator.iter_errors(value))
    except RecursionError:
        raise Unusable("refers to itself without end") from None
    except Exception as exc:
        raise Unusable(f"cannot check a value ({type(exc).__name__}: {exc})"[:300]) from None


def _reference_outside(schema):
    """The first `$ref` or `$dynamicRef` that does not point inside the schema, or None.
    Iterative: a schema of any depth is walked safely."""
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                reference = key in ("$ref", "$dynamicRef") and isinstance(child, str)
                if reference and not child.startswith("#"):
                    return child
                stack.append(child)
        elif isinstance(item, list):
            stack.extend(item)
    return None
