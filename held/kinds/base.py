"""What every kind of held call shares; each kind's module overrides what is its own."""

from django.db import transaction

from held.models import Ceremony
from mcplet_host import audit
from mcplet_host.celery import enqueue

RESUME_TASK = "mcplet_host.resume_call"  # held.tasks.resume_call: held.lifecycle.resume


class HeldKind:
    """The rules of one kind of held call, which its rows delegate to (`Ceremony.rules`). The
    defaults are a tool call's: a person approves it, then the lifecycle runs it once."""

    kind = None  # its Ceremony.Kind
    runs_on_decision = True  # decided → held.lifecycle.resume runs (or refuses) it, once
    decides_alone = True  # its approval writes no other row (`after_decision` only queues)
    approvable = True  # a person's approval moves it (a form is answered instead)
    carries_assertion = False  # a strict one takes its passkey assertion to the MCPlet
    may_run_again = False  # a person may run it again when its outcome is unknown
    sends_again = False  # its call already reached the server, which asked a person first
    declined = {
        Ceremony.Status.REJECTED: "The approver rejected this; nothing ran.",
        Ceremony.Status.EXPIRED: "Nobody approved this in time; nothing ran.",
    }

    def after_decision(self, ceremony):
        """In the deciding transaction, after the decision is saved and audited."""
        if self.runs_on_decision:
            transaction.on_commit(lambda: enqueue(RESUME_TASK, [ceremony.pk]))

    def before_run(self, ceremony):
        """Just before an approved call is sent: None to send it, or the ceremony, settled
        otherwise (nothing is sent)."""
        return None

    next_step = "Approve or reject it"  # what a person does on its page, as an imperative

    def describe(self, ceremony):
        """What waits, in a person's words: e.g. "an approval of the action send_email"."""
        tool, mcplet_type = (
            ceremony.tool_name,
            ceremony.mcplet.mcplet_type if ceremony.mcplet else "",
        )
        if ceremony.proposed_by_model:
            return f"an approval of {tool}, which {ceremony.agent_id}'s model proposed"
        if ceremony.mcplet and mcplet_type == ceremony.mcplet.Type.ACTION:
            return f"an approval of the action {tool}"
        what = f"the {mcplet_type} {tool}" if mcplet_type else tool
        return f"an approval of {what}, which its server asks a person to approve"

    @staticmethod
    def server_of(ceremony):
        return f"the server {ceremony.server_name}" if ceremony.server_name else "its server"

    def outcome(self, ceremony):
        """Its state as a person names it."""
        return ceremony.get_status_display()


class SentAgain(HeldKind):
    """A call whose server asked a person for something first (a step, a form): once it is
    done, the same call goes to the server again, once — or, strict, is held again for a fresh
    passkey approval (its first assertion was used once)."""

    sends_again = True
    retried_event = None  # the audit event of the retry

    def before_run(self, ceremony):
        from held.kinds import tool_call  # it builds on this module

        if ceremony.enforcement == Ceremony.Enforcement.STRICT and ceremony.mcplet:
            return tool_call.approve_again(ceremony)
        ceremony.asker.record(
            self.retried_event,
            audit.PENDING,
            {"ceremony": ceremony.token[:8], **ceremony.authority.audit_details()},
            server=ceremony.server_name,
            tool=ceremony.tool_name,
        )
        return None
