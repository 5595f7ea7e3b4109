import shlex

from django import forms

from pools.models import McpServer

MASK = "••••••••"


class SecretMappingField(forms.CharField):
    """Edits a name → secret mapping as lines of text, never showing a saved value again.

    A saved entry is displayed as `NAME<sep> ••••••••`; leaving the mask in place keeps the
    stored value, typing a new value replaces it, deleting the line removes it.
    """

    def __init__(self, separator, **kwargs):
        self.separator = separator
        kwargs.setdefault("required", False)
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 3, "cols": 60}))
        super().__init__(strip=False, **kwargs)

    def masked(self, mapping):
        return "\n".join(f"{name}{self.separator} {MASK}" for name in mapping)

    def parse(self, text, stored):
        mapping = {}
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            name, sep, value = line.partition(self.separator)
            name, value = name.strip(), value.strip()
            if not sep or not name:
                raise forms.ValidationError(
                    f"Line {number}: write NAME{self.separator} value.", code="invalid"
                )
            if value == MASK:
                if name not in stored:
                    raise forms.ValidationError(
                        f"Line {number}: {name} has no saved value to keep; type its value.",
                        code="invalid",
                    )
                value = stored[name]
            mapping[name] = value
        return mapping


class McpServerForm(forms.ModelForm):
    args_line = forms.CharField(
        label="Arguments",
        required=False,
        help_text="stdio: the command's arguments as you would type them in a shell, "
        "e.g. -m mcplets.restaurant.crm --stdio",
    )
    env = SecretMappingField(
        "=", help_text="stdio: one NAME=value per line. Saved values are never shown again."
    )
    headers = SecretMappingField(
        ":", help_text="http: one Header: value per line. Saved values are never shown again."
    )

    class Meta:
        model = McpServer
        fields = ["name", "transport", "command", "args_line", "env", "url", "headers", "enabled"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.initial["args_line"] = shlex.join(self.instance.args or [])
        self.initial["env"] = self.fields["env"].masked(self.instance.env or {})
        self.initial["headers"] = self.fields["headers"].masked(self.instance.headers or {})

    def clean_args_line(self):
        try:
            return shlex.split(self.cleaned_data["args_line"])
        except ValueError as exc:
            raise forms.ValidationError(f"Cannot split the arguments: {exc}.") from None

    def clean_env(self):
        return self.fields["env"].parse(self.cleaned_data["env"], self.instance.env or {})

    def clean_headers(self):
        return self.fields["headers"].parse(
            self.cleaned_data["headers"], self.instance.headers or {}
        )

    def _post_clean(self):
        self.instance.args = self.cleaned_data.get("args_line", self.instance.args)
        super()._post_clean()
