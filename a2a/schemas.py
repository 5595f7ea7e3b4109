"""The A2A protocol contract's JSON Schemas (spec §18.6), loaded once and ready to validate.

The four schema files in ``a2a/json_schemas/`` are the normative §18.6 text, verbatim. They are
Draft 2020-12 and refer to each other by ``mcplet://schema/a2a/...`` URIs (the task request and
response ``$ref`` the message envelope), which resolve through a :class:`referencing.Registry`
built here, never over the network.

``format`` is asserted, not just annotated: ``uuid`` by jsonschema's own checker, and
``date-time`` by a stdlib RFC 3339 checker defined here, because jsonschema only checks
``date-time`` when the optional ``rfc3339-validator`` package is installed (it is not a
dependency), and would otherwise let any string through.

    validate("task-request", message)   # raises A2AValidationError(message, path)
    schema("agent-card")                # a copy of the schema dict
    SCHEMA_URIS["task-response"]        # "mcplet://schema/a2a/task-response"

The standard bindings' wire format (A2A protocol 1.0, ProtoJSON) is ``a2a-v1.json`` beside them,
generated from the published a2a.proto (tests/a2a_sdk/dump_schema.py; a test keeps it equal):

    validate_wire("SendMessageRequest", params)   # any of its $defs
"""

import copy
import functools
import json
import re
from datetime import datetime
from importlib import resources

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import best_match
from referencing import Registry, Resource

KINDS = ("agent-card", "message-envelope", "task-request", "task-response")
SCHEMA_URIS = {kind: f"mcplet://schema/a2a/{kind}" for kind in KINDS}
WIRE_URI = "mcplet://schema/a2a/a2a-v1"

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RFC3339_DATE_TIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
)


class A2AValidationError(ValueError):
    """An A2A payload does not match its §18.6 schema.

    ``path`` is the JSON path of the offending field in the payload (``"payload.parameters"``,
    ``"payload.history[0].role"``, ``"replyToMessageId"``); for a missing required field it is the
    path the field should have had (``"messageId"``); ``""`` means the payload as a whole.
    ``errors`` lists every ``(path, message)`` found, the best match first.
    """

    def __init__(self, message, path="", errors=()):
        super().__init__(message)
        self.message = message
        self.path = path
        self.errors = tuple(errors) or ((path, message),)

    def __str__(self):
        return f"{self.path}: {self.message}" if self.path else self.message


def _is_rfc3339_date_time(instance):
    if not isinstance(instance, str):
        return True
    match = _RFC3339_DATE_TIME.match(instance)
    if match is None:
        return False
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    if second == 60:  # a leap second is valid RFC 3339; datetime cannot hold it
        second = 59
    try:
        datetime(year, month, day, hour, minute, second)
    except ValueError:
        return False
    offset = match.group(8)
    return offset in ("Z", "z") or (int(offset[1:3]) <= 23 and int(offset[4:6]) <= 59)


def _format_checker():
    checker = FormatChecker()  # every format jsonschema can check with what is installed
    checker.checks("date-time")(_is_rfc3339_date_time)  # per-instance: the class is untouched
    return checker


def _load():
    folder = resources.files(__package__) / "json_schemas"
    schemas = {}
    for kind in KINDS:
        contents = json.loads((folder / f"{kind}.json").read_text(encoding="utf-8"))
        Draft202012Validator.check_schema(contents)
        if contents.get("$id") != SCHEMA_URIS[kind]:
            raise RuntimeError(f"{kind}.json has $id {contents.get('$id')!r}")
        schemas[kind] = contents
    registry = (
        Registry()
        .with_resources(
            (SCHEMA_URIS[kind], Resource.from_contents(contents))
            for kind, contents in schemas.items()
        )
        .crawl()
    )
    wire = json.loads((folder / "a2a-v1.json").read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(wire)
    registry = registry.with_resource(WIRE_URI, Resource.from_contents(wire))
    return schemas, registry, wire


@functools.cache
def _compiled():
    """The schemas checked and their validators built, once per process at first use: about
    0.1 s that every command and process start would otherwise pay."""
    schemas, registry, wire = _load()
    checker = _format_checker()
    validators = {
        kind: Draft202012Validator(contents, registry=registry, format_checker=checker)
        for kind, contents in schemas.items()
    }
    wire_validators = {
        name: Draft202012Validator(
            {"$ref": f"{WIRE_URI}#/$defs/{name}"}, registry=registry, format_checker=checker
        )
        for name in wire["$defs"]
    }
    return schemas, validators, wire_validators


def _kind(kind):
    if kind not in KINDS:
        raise KeyError(f"unknown A2A schema {kind!r}; expected one of {', '.join(KINDS)}")
    return kind


def schema(kind):
    """A copy of the §18.6 schema for ``kind`` (one of :data:`KINDS`)."""
    return copy.deepcopy(_compiled()[0][_kind(kind)])


def json_path(parts):
    """``["payload", "history", 0, "role"]`` -> ``"payload.history[0].role"``."""
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _IDENTIFIER.match(part):
            path += f".{part}" if path else part
        else:
            path += f"[{json.dumps(part, ensure_ascii=False)}]"
    return path


def _error_path(error):
    # absolute_path follows the data, not the schema, so errors found inside an allOf branch or
    # behind a $ref are located in the payload (the schema side lives in error.absolute_schema_path)
    parts = list(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [
            name
            for name in error.validator_value
            if name not in error.instance and error.message == f"{name!r} is a required property"
        ]
        if missing:
            parts.append(missing[0])
    return json_path(parts)


def validate(kind, payload):
    """Check ``payload`` against the §18.6 schema ``kind``; raise :class:`A2AValidationError`."""
    _raise_first(_compiled()[1][_kind(kind)], payload)


def validate_wire(name, payload):
    """Check ``payload`` against the A2A 1.0 definition ``name`` (``"Task"``, ``"AgentCard"``,
    ``"SendMessageRequest"``...); raise :class:`A2AValidationError`."""
    _raise_first(_compiled()[2][name], payload)


def _raise_first(validator, payload):
    errors = list(validator.iter_errors(payload))
    if not errors:
        return
    best = best_match(errors)
    others = [error for error in errors if error is not best]
    raise A2AValidationError(
        best.message,
        _error_path(best),
        [(_error_path(error), error.message) for error in [best, *others]],
    )
