"""Form fields the rooms' admin forms share (`FORM_FIELDS`, a ModelAdmin's
formfield_overrides)."""

from django import forms
from django.db import models

from mcplet_host import storable


class TypedText(forms.CharField):
    """A textarea's text with its line breaks as typed: browsers post them as CRLF, which made
    an agent saved unchanged a prompt change (audited, and sent to the LLM with its CRs)."""

    def to_python(self, value):
        value = super().to_python(value)
        return value.replace("\r\n", "\n") if isinstance(value, str) else value


class ShownJSON(forms.JSONField):
    """JSON shown as written, but escaped where UTF-8 cannot carry it: a form refused for a
    lone surrogate (`storable.validate`) is shown again with it, not as a 500."""

    def prepare_value(self, value):
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        return storable.json_text(value)


FORM_FIELDS = {
    models.TextField: {"form_class": TypedText},
    models.JSONField: {"form_class": ShownJSON},
}
