"""A form a server asks a person to fill in before it answers a call (MCP 2026-07-28: an
`input_required` result with a form elicitation). Unlike a 2025-11-25 form (held.kinds.form),
nothing waits in a worker: the call's state is the server's `requestState`, kept sealed on the
row, so the form can wait for hours and outlive restarts. Answered on the form page (never by
an LLM), a worker sends the same call again, once, with the answer and that state; declined,
cancelled or expired, nothing more is sent. A strict action, once answered, is held again for
a fresh passkey approval bound to the call."""

from django.db import transaction

from held.kinds import form, tool_call
from held.kinds.base import SentAgain
from held.models import Ceremony
from mcplet_host import audit


class InputForm(SentAgain):
    kind = Ceremony.Kind.INPUT_FORM
    retried_event = "mcplet.elicitation.retried"
    approvable = False  # answered, not approved
    declined = {
        Ceremony.Status.REJECTED: "The form was declined; the call was not sent again.",
        Ceremony.Status.EXPIRED: "Nobody answered the form in time; the call was not sent again.",
    }

    next_step = "Answer it (or decline)"

    def describe(self, ceremony):
        where = self.server_of(ceremony)
        return f"a form {where} asks a person to fill in before {ceremony.tool_name} answers"

    def answer(self, held, user, action, content):
        """In `form.answer`'s transaction, on the locked row: accepted, the answer joins what
        the retry carries and the call is approved to be sent again; declined or cancelled,
        nothing more is sent (the waiting run hears so)."""
        if action != "accept":
            held.decline(Ceremony.Status.REJECTED, user)
            form.audit_answer(held, action)
            return
        key = held.elicitations[0]["inputKey"]
        responses = {key: {"action": "accept", "content": content}}
        held.input_round = {**held.input_round, "inputResponses": responses}
        held.save(update_fields=["input_round"])
        held._decide(Ceremony.Status.APPROVED, user)
        form.audit_answer(held, action, content)
        self.after_decision(held)


def hold(mcplet, arguments, asked, asker, enforcement):
    """Hold the call until a person answers the form `asked` (gateway.rounds.InputRequired)
    asks; the answer goes into its `input_round` (`answer`). Audited as forms are."""
    with transaction.atomic():
        ceremony = tool_call.open_call(
            Ceremony.Kind.INPUT_FORM,
            mcplet,
            arguments,
            asker,
            prompt_message=asked.form["message"],
            elicitations=[asked.form],
            enforcement=enforcement,
            input_round=asked.reply({}),
        )
        asker.record(
            "mcplet.elicitation.requested",
            audit.PENDING,
            {
                **asker.authority.audit_details(),
                "ceremony": ceremony.token[:8],
                "round": "input_required",
                "expires_at": ceremony.expires_at,
            },
            server=mcplet.server.name,
            tool=mcplet.name,
        )
    return ceremony


RULES = InputForm()
