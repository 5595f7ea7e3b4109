"""Print the A2A 1.0 protocol as one JSON Schema (Draft 2020-12), built from the descriptors of
the published a2a.proto that the a2a-sdk ships compiled. Run with the SDK's own interpreter:
its output is a2a/json_schemas/a2a-v1.json (the test suite regenerates and compares it).

The JSON is the ProtoJSON mapping the bindings use: lowerCamelCase names, enums by name,
64-bit integers as strings, Timestamp as RFC 3339, Struct/Value as any JSON. Fields marked
REQUIRED in the proto are required; a oneof holds exactly one of its fields; unknown members
are refused, so a typo on the wire is caught."""

import json
import sys

from a2a.types import a2a_pb2
from google.api import field_behavior_pb2
from google.protobuf.descriptor import FieldDescriptor

SCALARS = {
    FieldDescriptor.TYPE_DOUBLE: {"type": "number"},
    FieldDescriptor.TYPE_FLOAT: {"type": "number"},
    FieldDescriptor.TYPE_INT64: {"type": "string", "pattern": "^-?[0-9]+$"},
    FieldDescriptor.TYPE_UINT64: {"type": "string", "pattern": "^[0-9]+$"},
    FieldDescriptor.TYPE_INT32: {"type": "integer"},
    FieldDescriptor.TYPE_UINT32: {"type": "integer", "minimum": 0},
    FieldDescriptor.TYPE_BOOL: {"type": "boolean"},
    FieldDescriptor.TYPE_STRING: {"type": "string"},
    FieldDescriptor.TYPE_BYTES: {"type": "string", "contentEncoding": "base64"},
}
WELL_KNOWN = {
    "google.protobuf.Timestamp": {"type": "string", "format": "date-time"},
    "google.protobuf.Struct": {"type": "object"},
    "google.protobuf.Value": {},
}


def required(field):
    behaviors = field.GetOptions().Extensions[field_behavior_pb2.field_behavior]
    return field_behavior_pb2.REQUIRED in behaviors


def field_schema(field, defs):
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value = field.message_type.fields_by_name["value"]
        return {"type": "object", "additionalProperties": field_schema(value, defs)}
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        item = message_schema(field.message_type, defs)
    elif field.type == FieldDescriptor.TYPE_ENUM:
        item = {"type": "string", "enum": [value.name for value in field.enum_type.values]}
    else:
        item = dict(SCALARS[field.type])
    if field.is_repeated:
        return {"type": "array", "items": item}
    return item


def message_schema(descriptor, defs):
    if descriptor.full_name in WELL_KNOWN:
        return dict(WELL_KNOWN[descriptor.full_name])
    name = descriptor.name
    if name not in defs:
        defs[name] = {}  # reserved first: the types are recursive
        schema = {
            "type": "object",
            "properties": {f.json_name: field_schema(f, defs) for f in descriptor.fields},
            "additionalProperties": False,
        }
        needed = [f.json_name for f in descriptor.fields if required(f)]
        if needed:
            schema["required"] = needed
        oneofs = [o for o in descriptor.oneofs if len(o.fields) > 1]
        if oneofs:
            schema["allOf"] = [
                {"oneOf": [{"required": [f.json_name]} for f in oneof.fields]} for oneof in oneofs
            ]
        defs[name] = schema
    return {"$ref": f"#/$defs/{name}"}


def main():
    defs = {}
    for descriptor in a2a_pb2.DESCRIPTOR.message_types_by_name.values():
        message_schema(descriptor, defs)
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "mcplet://schema/a2a/a2a-v1",
        "title": "A2A protocol 1.0 (ProtoJSON), from the published a2a.proto",
        "$defs": dict(sorted(defs.items())),
    }
    json.dump(schema, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
