import re
import shlex
from urllib.parse import urlsplit

from django import forms

from mcplet_host.headers import TCHAR
from pools.mcp_client import command_problem
from pools.models import McpServer

MASK = "••••••••"
# Names that say their value is a credential, whatever it looks like.
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASS|AUTH|CREDENTIAL|COOKIE|SESSION", re.IGNORECASE)


def is_secret(name, value):
    """Every value is a secret but a plain http(s) URL (no user info, query or fragment, where
    credentials hide) under a name that does not say otherwise: an address an operator must be
    able to read back, such as MCPLET_VERIFY_URL."""
    if SECRET_NAME.search(name):
        return True
    try:
        url = urlsplit(value)
    except ValueError:
        return True
    plain = url.scheme in ("http", "https") and url.hostname
    return not plain or bool(url.username or url.query or url.fragment)


class SecretMappingField(forms.CharField):
    """Edits a name → value mapping as lines of text, never showing a saved secret again.

    A saved secret is displayed as `NAME<sep> ••••••••` (a plain URL as it is); leaving the mask
    in place keeps the stored value, typing a new value replaces it, deleting the line removes
    it.
    """

    def __init__(self, separator, **kwargs):
        self.separator = separator
        kwargs.setdefault("required", False)
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 3, "cols": 60}))
        super().__init__(strip=False, **kwargs)

    def masked(self, mapping):
        return "\n".join(
            f"{name}{self.separator} {MASK if is_secret(name, value) else value}"
            for name, value in mapping.items()
        )

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
            if problem := self.line_problem(name, value):
                raise forms.ValidationError(f"Line {number}: {problem}.", code="invalid")
        return mapping

    def line_problem(self, name, value):
        return ""


class HeaderMappingField(SecretMappingField):
    """HTTP request headers (`Name: value` lines), refused here when a client could not send
    them: a name that is not an RFC 9110 token, a value outside visible ASCII."""

    TOKEN = re.compile(rf"{TCHAR}+")
    VALUE = re.compile(r"[\t\x20-\x7e]*")

    def __init__(self, **kwargs):
        super().__init__(":", **kwargs)

    def line_problem(self, name, value):
        if not self.TOKEN.fullmatch(name):
            return f"{name!r} is not a header name (letters, digits and !#$%&'*+.^_`|~- only)"
        if not self.VALUE.fullmatch(value):
            return f"the value of {name} holds a character a header cannot carry (ASCII only)"
        return ""


class SecretTextarea(forms.Textarea):
    """A textarea (a PEM key has lines) that never sends a typed value back to the page."""

    def format_value(self, value):
        return None


class McpServerForm(forms.ModelForm):
    args_line = forms.CharField(
        label="Arguments",
        required=False,
        help_text="stdio: the command's arguments as you would type them in a shell, "
        "e.g. -m mcplets.restaurant.crm --stdio",
    )
    env = SecretMappingField(
        "=",
        help_text="stdio: one NAME=value per line. Saved secrets are never shown again (plain "
        "URLs are). MCPLET_VERIFY_URL, when not set here, is the host's own.",
    )
    headers = HeaderMappingField(
        help_text="http: one Header: value per line. Saved secrets are never shown again.",
    )

    oauth_client_secret = forms.CharField(
        label="OAuth client secret",
        required=False,
        strip=True,
        widget=SecretTextarea(attrs={"rows": 2, "cols": 60, "autocomplete": "off"}),
        help_text="Client credentials: a shared secret, or the client's private key in PEM "
        "(RSA or EC P-256: private_key_jwt). Stored sealed and never shown again: leave empty "
        "to keep the saved one.",
    )

    class Meta:
        model = McpServer
        fields = [
            "name",
            "transport",
            "command",
            "args_line",
            "env",
            "url",
            "headers",
            "auth",
            "oauth_client_id",
            "oauth_client_secret",
            "oauth_scope",
            "oauth_issuer",
            "enabled",
        ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.initial["args_line"] = shlex.join(self.instance.args or [])
        self.initial["env"] = self.fields["env"].masked(self.instance.env or {})
        self.initial["headers"] = self.fields["headers"].masked(self.instance.headers or {})
        if "auth" in self.fields:  # not for a user who may only view
            self.fields["auth"].required = False

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

    def clean_auth(self):
        # A form posted by a script that predates the choice means what it meant: no OAuth.
        return self.cleaned_data.get("auth") or McpServer.Auth.NONE

    def clean_oauth_client_secret(self):
        return self.cleaned_data["oauth_client_secret"] or self.instance.oauth_client_secret or ""

    def clean(self):
        cleaned = super().clean()
        command = cleaned.get("command")
        if (
            cleaned.get("transport") == McpServer.Transport.STDIO
            and command
            and {"transport", "command"} & set(self.changed_data)
            and (problem := command_problem(command))
        ):
            self.add_error("command", f"{problem[0].upper()}{problem[1:]} on this host.")
        return cleaned

    def _post_clean(self):
        self.instance.args = self.cleaned_data.get("args_line", self.instance.args)
        super()._post_clean()
