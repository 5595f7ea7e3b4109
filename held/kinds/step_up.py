"""A call its server answered with a step a person must take first (MCP URL mode: a -32042
error, PWMA's too, or a 2026-07-28 `input_required` result): held like an approval (no worker
waits), its page shows the steps; once the step is done — a person says so, or the server's
`notifications/elicitation/complete` reaches any process — the same call is sent again, once
(an `input_required` round's retry with its answers and `requestState`). A strict action's
step, once done, is held again for a fresh passkey approval: its first assertion was used
once. A form asked in an `input_required` round is held on the form page (input_form)."""

from django.db import transaction

from held.kinds import input_form, tool_call
from held.kinds.base import SentAgain
from held.models import Ceremony
from mcplet_host import audit
from mcplet_host.gateway.envelopes import steps

ACCEPTED = {"action": "accept"}


class StepUp(SentAgain):
    kind = Ceremony.Kind.STEP_UP
    # The same call, the same arguments (PWMA's requestId with them), sent once more.
    retried_event = "mcplet.stepup.retried"
    # Its first call did run (and asked for the step): nothing *more* ran.
    declined = {
        Ceremony.Status.REJECTED: "The step was cancelled; the call was not sent again.",
        Ceremony.Status.EXPIRED: "Nobody finished the step in time; the call was not sent again.",
    }

    next_step = "Take the step, then say so (or cancel it)"

    def describe(self, ceremony):
        where, tool = self.server_of(ceremony), ceremony.tool_name
        return f"a step a person must take on {where}'s side before {tool} is sent again"


def hold_if_asked(mcplet, arguments, answer, asker, enforcement=Ceremony.Enforcement.HOST_ONLY):
    """Hold the call if its `answer` (gateway.execute.Answer) asks a person for a step or a
    form first (else None): the approvers are told as for any held call. Audited."""
    asked, envelope = answer.asked, answer.envelope
    if asked is not None and asked.form is not None:
        return input_form.hold(mcplet, arguments, asked, asker, enforcement)
    elicitations = asked.steps if asked is not None else steps(envelope)
    if not elicitations:
        return None
    with transaction.atomic():
        ceremony = tool_call.open_call(
            Ceremony.Kind.STEP_UP,
            mcplet,
            arguments,
            asker,
            elicitations=elicitations,
            prompt_message=envelope["error"]["message"],
            enforcement=enforcement,
            # Done means accepted: the retry says so for each step, with the server's state.
            input_round=asked.reply({s["inputKey"]: ACCEPTED for s in elicitations})
            if asked is not None
            else None,
        )
        asker.record(
            "mcplet.stepup.held",
            audit.PENDING,
            {
                **asker.authority.audit_details(),
                "ceremony": ceremony.token[:8],
                "elicitations": [
                    {k: e.get(k) for k in ("elicitationId", "mode", "domain") if k in e}
                    for e in ceremony.elicitations
                ],
                "expires_at": ceremony.expires_at,
            },
            server=mcplet.server.name,
            tool=mcplet.name,
        )
    return ceremony


def complete(ceremony, by=None, elicitation_id=""):
    """The step is done: a person said so (`by`), or the server's
    notifications/elicitation/complete came (`elicitation_id`). The call is sent again, once.
    False if it is no longer waiting."""
    if ceremony.kind != Ceremony.Kind.STEP_UP:
        return False
    with transaction.atomic():  # the retry is queued once both are committed
        if not ceremony.approve(by):
            return False
        ceremony.audit_event(
            "mcplet.stepup.completed",
            audit.SUCCESS,
            {
                "via": "notification" if elicitation_id else "person",
                **({"elicitationId": elicitation_id} if elicitation_id else {}),
                **ceremony.authority.audit_details(),
            },
            by=by,
            system=f"server:{ceremony.server_name}",
        )
    return True


def completed_by_server(server_id, elicitation_id):
    """The server `server_id` says the step `elicitation_id` is done: complete the step-ups
    that wait for it (any process's session may have heard it)."""
    waiting = Ceremony.objects.pending().filter(
        kind=Ceremony.Kind.STEP_UP, mcplet__server_id=server_id
    )
    done = 0
    for ceremony in waiting:
        ids = {e.get("elicitationId") for e in ceremony.elicitations if isinstance(e, dict)}
        if elicitation_id in ids and complete(ceremony, elicitation_id=elicitation_id):
            done += 1
    return done


RULES = StepUp()
