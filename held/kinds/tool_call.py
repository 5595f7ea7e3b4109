"""A tool call held for a person's approval: an action, a tool declaring `_meta.auth`, or an
app call an LLM proposed (spec §4, §8.2). Approved with a passkey, it runs once; a strict one
carries its assertion to the MCPlet."""

from django.db import transaction
from django.utils import timezone

from held.kinds.base import HeldKind
from held.models import Ceremony
from mcplet_host import audit


class ToolCall(HeldKind):
    kind = Ceremony.Kind.TOOL_CALL
    carries_assertion = True
    may_run_again = True


def hold(mcplet, arguments, asker, input_round=None, **audited):
    """Hold `mcplet(arguments)` for `asker` until a person decides (`input_round`: what its
    send carries, the retry of an `input_required` round); audited as requested (with
    `audited` added to the event's details)."""
    with transaction.atomic():
        ceremony = open_call(
            Ceremony.Kind.TOOL_CALL, mcplet, arguments, asker, input_round=input_round
        )
        asker.record(
            "mcplet.approval.requested",
            audit.PENDING,
            {
                **asker.call_details(),
                "ceremony": ceremony.token[:8],
                "arguments": arguments,
                "enforcement": ceremony.enforcement,
                "expires_at": ceremony.expires_at,
                **audited,
            },
            server=mcplet.server.name,
            tool=mcplet.name,
        )
    return ceremony


def open_call(kind, mcplet, arguments, asker, **fields):
    """A held row for a call of `mcplet`: its server, its prompt and its enforcement (an action
    without `auth` is still held, §4: the host's confirmation suffices), unless `fields` say
    otherwise."""
    call = {
        "mcplet": mcplet,
        "server_name": mcplet.server.name,
        "prompt_message": mcplet.auth_prompt_message,
        "enforcement": mcplet.auth_enforcement or Ceremony.Enforcement.HOST_ONLY,
    }
    return Ceremony.create_held(
        kind, asker, tool_name=mcplet.name, arguments=arguments, **(call | fields)
    )


def approve_again(ceremony):
    """A strict action's step (or form) is done, but its passkey assertion was used once: the
    same call is held for a fresh approval (a new challenge bound to the same call), for the
    same continuation, with what its retry carries. Nothing is sent until then."""
    with transaction.atomic():
        again = hold(
            ceremony.mcplet,
            ceremony.arguments,
            ceremony.asker,
            input_round=ceremony.input_round,
            after_step=ceremony.token[:8],
        )
        ceremony.status, ceremony.executed_at = Ceremony.Status.EXECUTED, timezone.now()
        ceremony.result = {"stepCompleted": True, "approval": again.token[:8]}
        ceremony.save(update_fields=["status", "result", "executed_at"])
    ceremony.notify_continuation()
    return ceremony


RULES = ToolCall()
