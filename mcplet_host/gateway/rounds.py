"""MCP 2026-07-28's multi round-trip: a tool answers `input_required` — it asks for a step in
the browser (URL mode) or a form before it can answer — with an opaque `requestState`, and the
client sends the same call again with the answers and that state. The host takes what is asked
to a person as a held call (held.kinds.step_up, held.kinds.input_form); this module reads the
answer and says what the retry carries."""

from dataclasses import dataclass, field

from mcplet_host import storable
from mcplet_host.gateway.envelopes import (
    INPUT_REQUIRED,
    INPUT_UNSUPPORTED,
    MAX_ELICITATIONS,
    error_envelope,
    url_step,
)

MAX_MESSAGE = 2000
MAX_KEY = 200


@dataclass(frozen=True)
class InputRequired:
    """What an `input_required` answer asks of a person: URL steps (each with its `inputKey`)
    or one form, and the server's `requestState` — opaque and sensitive: never in the audit, a
    log, a page or an envelope; kept sealed on the held call, and sent back only with it."""

    steps: list = field(default_factory=list)
    form: dict | None = None
    request_state: str | None = field(default=None, repr=False)

    def reply(self, responses):
        """What the retry carries (Ceremony.input_round): the answers by key, and the state."""
        return {"inputResponses": responses, "requestState": self.request_state}

    @property
    def public(self):
        """What the pages and the audit may show: the steps or the form, never the state."""
        return self.steps or [self.form]


def read(mcplet, result):
    """(envelope, InputRequired or None) for an InputRequiredResult: held for a person, or —
    asked for something no person here can give (sampling, roots, several forms, an ambiguous
    URL) — an error, and nothing more is sent."""
    steps, forms, refused = [], [], []
    for key, request in list(result.input_requests.items())[:MAX_ELICITATIONS]:
        params = request.params.model_dump(by_alias=True, exclude_none=True, mode="json")
        if not 0 < len(key) <= MAX_KEY or storable.problem(key):  # kept on the row, and echoed
            refused.append(f"a request key it cannot keep ({storable.printable(key)[:MAX_KEY]})")
        elif request.method != "elicitation/create":
            refused.append(f"{request.method} ({key})")
        elif params.get("mode") == "url":
            step = url_step(params)
            steps.append({**step, "inputKey": key}) if step else refused.append(f"a URL ({key})")
        elif (form := _form(key, params)) is not None:
            forms.append(form)
        else:
            refused.append(f"a form ({key})")
    count = len(result.input_requests)
    if count > MAX_ELICITATIONS or not count:
        refused.append(f"{count} requests")
    if forms and (steps or len(forms) > 1):
        refused.append("a form together with other requests")
    if refused:
        message = (
            f"The server {mcplet.server.name} asks for input this host cannot take to a person: "
            f"{', '.join(refused)}. Nothing more was sent."
        )
        return error_envelope(INPUT_UNSUPPORTED, message, mcplet.name, mcplet), None
    asked = InputRequired(steps, forms[0] if forms else None, result.request_state)
    what = "a step in the browser" if steps else "a form"
    message = (
        f"The server {mcplet.server.name} asks a person for {what} before {mcplet.name} can "
        "answer (MCP input_required); the call is held until it is done."
    )
    envelope = error_envelope(
        INPUT_REQUIRED,
        message,
        mcplet.name,
        mcplet,
        retryable=False,
        category="security",
        details={"elicitations": asked.public},
    )
    return envelope, asked


def _form(key, params):
    """A form a person can fill in (passkey.forms draws it), or None."""
    from passkey.forms import schema_problem

    message, schema = params.get("message"), params.get("requestedSchema")
    if not isinstance(message, str) or schema_problem(schema) or storable.problem(params):
        return None
    return {
        "inputKey": key,
        "mode": "form",
        "message": message[:MAX_MESSAGE],
        "requestedSchema": schema,
    }
