"""The form a person fills in for a server's form elicitation, built from the schema the server
requested (MCP restricts it to a flat object of string, number, integer, boolean and enum
properties), and the answer checked against that schema before it is sent."""

import jsonschema
from django import forms

from mcplet_host import storable

PRIMITIVES = {"string", "number", "integer", "boolean"}
STRING_FORMATS = {"email": forms.EmailField, "uri": forms.URLField, "date": forms.DateField}


def schema_problem(schema):
    """Why `schema` is not a form the host will show (None if it is): the server's input."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "the requested schema is not an object"
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties or len(properties) > 50:
        return "the requested schema has no properties (or too many)"
    for name, prop in properties.items():
        if not isinstance(prop, dict) or prop.get("type") not in PRIMITIVES:
            return f"the property {name!r} is not a string, number, integer, boolean or enum"
    required = schema.get("required", [])
    if not isinstance(required, list) or not set(required) <= set(properties):
        return "the schema requires properties it does not define"
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"the requested schema is invalid: {exc.message}"
    return None


def _field(prop, required):
    label = prop.get("title") or None
    common = {"required": required, "label": label, "help_text": prop.get("description", "")}
    kind = prop["type"]
    if isinstance(prop.get("enum"), list):
        names = [storable.marked(str(name)) for name in prop.get("enumNames") or prop["enum"]]
        return forms.ChoiceField(choices=list(zip(prop["enum"], names, strict=False)), **common)
    if kind == "boolean":
        return forms.BooleanField(**{**common, "required": False}, initial=prop.get("default"))
    if kind == "integer":
        return forms.IntegerField(
            min_value=prop.get("minimum"), max_value=prop.get("maximum"), **common
        )
    if kind == "number":
        return forms.FloatField(
            min_value=prop.get("minimum"), max_value=prop.get("maximum"), **common
        )
    field = STRING_FORMATS.get(prop.get("format"), forms.CharField)
    limits = {"min_length": prop.get("minLength"), "max_length": prop.get("maxLength")}
    return field(**(limits if field is not forms.DateField else {}), **common)


class ElicitationForm(forms.Form):
    """`ElicitationForm(schema, data)`: one field per property, the schema's names kept."""

    def __init__(self, schema, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.schema = schema
        required = set(schema.get("required", []))
        for name, prop in schema["properties"].items():
            self.fields[name] = _field(prop, name in required)

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        content = {}
        for name, value in cleaned.items():
            if value in (None, "") and name not in self.schema.get("required", []):
                continue  # left empty: not sent
            content[name] = value.isoformat() if hasattr(value, "isoformat") else value
        errors = sorted(jsonschema.Draft202012Validator(self.schema).iter_errors(content), key=str)
        if errors:
            raise forms.ValidationError(errors[0].message)
        self.content = content
        return cleaned
