"""A form a server asks a person to fill in *during* a call (`elicitation/create`, form mode):
the worker running the call waits (MCPLET_ELICITATION_WAIT) for a person's answer on the form's
page; an LLM never answers. Never approved into a call that runs, and no task runs on its
decision: the waiting worker reads the answer."""

import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from held.kinds import tool_call
from held.kinds.base import HeldKind
from held.models import Ceremony
from mcplet_host import audit, storable
from passkey.forms import schema_problem

DECLINE = {"action": "decline"}


class Form(HeldKind):
    kind = Ceremony.Kind.FORM
    runs_on_decision = False
    approvable = False

    next_step = "Answer it (or decline)"

    def describe(self, ceremony):
        where = self.server_of(ceremony)
        return f"a form {where} asks a person to fill in during {ceremony.tool_name}"

    def after_decision(self, ceremony):
        """Declined or expired: the waiting worker reads the decline."""
        ceremony.result = DECLINE
        ceremony.save(update_fields=["result"])
        audit_answer(ceremony, "decline")

    def answer(self, held, user, action, content):
        """On the locked row: the answer is the result the waiting worker reads."""
        accepted = action == "accept"
        held.status = Ceremony.Status.EXECUTED if accepted else Ceremony.Status.REJECTED
        held.decided_by, held.decided_at = user, timezone.now()
        held.result = {"action": action, **({"content": content} if accepted else {})}
        held.save(update_fields=["status", "decided_by", "decided_at", "result"])
        audit_answer(held, action)


class FormAsker:
    """Takes a server's form request made during the call `mcplet(arguments)` to a person, on
    behalf of `asker` (held.models.Asker): a form ceremony naming the call in flight, answered on
    its page within MCPLET_ELICITATION_WAIT seconds, or declined. Runs in a worker thread while
    the call waits."""

    def __init__(self, mcplet, arguments, asker):
        self.mcplet, self.arguments, self.asker = mcplet, arguments, asker.nobody_waits()
        self.wait = settings.MCPLET_ELICITATION_WAIT

    def ask(self, message, schema):
        message = message if isinstance(message, str) else ""
        problem = schema_problem(schema)
        if problem is None and (bad := storable.problem([message, schema])) is not None:
            problem = f"the request cannot be stored ({bad[1]})"
        if problem is not None:
            self.refuse(problem)
            return DECLINE
        message = message[:2000]
        ceremony = tool_call.open_call(
            Ceremony.Kind.FORM,
            self.mcplet,
            self.arguments,
            self.asker,
            prompt_message=message,
            elicitations=[{"mode": "form", "message": message, "requestedSchema": schema}],
            enforcement=Ceremony.Enforcement.HOST_ONLY,
            expires_at=timezone.now() + timedelta(seconds=self.wait),
        )
        self._audit("mcplet.elicitation.requested", audit.PENDING, ceremony=ceremony.token[:8])
        return wait_for_answer(ceremony)

    def refuse(self, reason):
        self._audit("mcplet.elicitation.declined", audit.BLOCKED, reason=reason)

    def _audit(self, event, result, **details):
        audit.record(
            event,
            actor_type=audit.ActorType.SYSTEM,
            actor_id=f"server:{self.mcplet.server.name}",
            target_server=self.mcplet.server.name,
            target_tool=self.mcplet.name,
            result=result,
            trace_id=self.asker.trace_id,
            details={
                "agent": self.asker.agent_id,
                **self.asker.authority.audit_details(),
                **details,
            },
        )


def requested_schema(ceremony):
    return ceremony.elicitations[0]["requestedSchema"]


def answer(ceremony, user, action, content=None):
    """A person's answer to a form (of either kind, Ceremony.FORMS): `accept` with the
    validated `content`, `decline` or `cancel`. False if it is no longer waiting (answered,
    expired)."""
    with transaction.atomic():
        held = Ceremony.objects.select_for_update().get(pk=ceremony.pk)
        if held.status != Ceremony.Status.PENDING or held.is_overdue:
            return False
        held.rules.answer(held, user, action, content)
    ceremony.refresh_from_db()
    return True


def wait_for_answer(ceremony, poll=0.25):
    """Block until a person answers or the form expires (then it is declined, audited): the
    MCP `ElicitResult` content, e.g. {"action": "accept", "content": {...}}."""
    while timezone.now() < ceremony.expires_at:
        ceremony.refresh_from_db(fields=["status", "result"])
        if ceremony.status != Ceremony.Status.PENDING:
            return ceremony.result or DECLINE
        time.sleep(poll)
    ceremony.decline(Ceremony.Status.EXPIRED)
    ceremony.refresh_from_db(fields=["status", "result"])
    return ceremony.result or DECLINE


def audit_answer(ceremony, action, content=None):
    user = ceremony.decided_by
    content = (ceremony.result or {}).get("content") if content is None else content
    ceremony.audit_event(
        "mcplet.elicitation.answered" if user else "mcplet.elicitation.expired",
        audit.SUCCESS if action == "accept" else audit.BLOCKED,
        # The answer's field names, never its values (they may be personal data).
        {
            "action": action,
            "agent": ceremony.agent_id,
            "fields": sorted(content or {}),
            **ceremony.authority.audit_details(),
        },
        by=user,
    )


RULES = Form()
