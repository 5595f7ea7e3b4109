"""A tool call held for a person's approval: an action, a tool declaring `_meta.auth`, or an
app call an LLM proposed (spec §4, §8.2). Approved with a passkey, it runs once; a strict one
carries its assertion to the MCPlet."""

from django.db import transaction

from held.kinds.base import HeldKind
from held.models import Ceremony
from mcplet_host import audit


class ToolCall(HeldKind):
    kind = Ceremony.Kind.TOOL_CALL
    carries_assertion = True
    may_run_again = True


def hold(mcplet, arguments, asker, **audited):
    """Hold `mcplet(arguments)` for `asker` until a person decides; audited as requested (with
    `audited` added to the event's details)."""
    with transaction.atomic():
        ceremony = open_call(Ceremony.Kind.TOOL_CALL, mcplet, arguments, asker)
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


RULES = ToolCall()
