"""Who a piece of work acts for (spec §3.6, §16.1, §16.4; docs/design.md, "Provenance").

One immutable value travels with the work: the partner a workflow started for (if any) and the
agents it went through before the current one, the Director included. The host sets it — from
the authenticated partner key, or from the run that sends a hand-off — never from an LLM's
output or a payload field. It is signed with every bus message, stored on every run and held
call, handed to the gateway, and written into every audit event of the workflow.

A tool call's effective grants are the calling agent's pools ∩ the pools of every external
principal here: a chain the operator wired may reach agents a partner could not call directly,
but it runs inside the partner's grants.

This module is pure: it imports nothing from the host's rooms.
"""

import re
from dataclasses import dataclass, replace

AGENT_ID = re.compile(r"^[-a-zA-Z0-9_]{1,100}$")  # agents.Agent.agent_id is a SlugField
MAX_CHAIN = 64  # hand-offs are wired by operators; a longer chain is a loop or a forgery


@dataclass(frozen=True)
class Authority:
    partner: str = ""  # the external principal the work acts for ("" for the host's own work)
    chain: tuple[str, ...] = ()  # agents before the current one, in order

    def __post_init__(self):
        if not isinstance(self.partner, str) or (self.partner and not AGENT_ID.match(self.partner)):
            raise ValueError(f"not an agent id: {self.partner!r}")
        if not isinstance(self.chain, tuple) or len(self.chain) > MAX_CHAIN:
            raise ValueError(f"the chain must be a tuple of at most {MAX_CHAIN} agent ids")
        for agent_id in self.chain:
            if not isinstance(agent_id, str) or not AGENT_ID.match(agent_id):
                raise ValueError(f"not an agent id in the chain: {agent_id!r}")

    @classmethod
    def of_partner(cls, partner_id):
        """A partner's own task, as its authenticated key says."""
        return cls(partner=partner_id)

    def then(self, agent_id):
        """The authority of work `agent_id` hands on: the same principal, one agent longer."""
        return replace(self, chain=(*self.chain, agent_id))

    @property
    def external_principals(self):
        """Whose grants bound every call of this work (besides the calling agent's own)."""
        return (self.partner,) if self.partner else ()

    # --- storage and the wire ----------------------------------------------------------------

    def to_json(self):
        value = {}
        if self.partner:
            value["partner"] = self.partner
        if self.chain:
            value["chain"] = list(self.chain)
        return value

    @classmethod
    def from_json(cls, value):
        """The value `to_json()` gave (None or {} for the host's own work); ValueError else."""
        if value is None:
            return cls()
        if not isinstance(value, dict) or set(value) - {"partner", "chain"}:
            raise ValueError(f"not a provenance: {value!r}")
        chain = value.get("chain", [])
        if not isinstance(chain, list):
            raise ValueError(f"not a chain of agents: {chain!r}")
        return cls(partner=value.get("partner", ""), chain=tuple(chain))

    # --- for people ----------------------------------------------------------------------------

    def describe(self):
        """E.g. "on behalf of acme-travel, via director → info-gathering-agent" ("" when the
        work is the host's own and came from nowhere)."""
        parts = []
        if self.partner:
            parts.append(f"on behalf of {self.partner}")
        if self.chain:
            parts.append("via " + " → ".join(self.chain))
        return ", ".join(parts)

    def audit_details(self):
        """For whom and through whom, as every audit event of the workflow records it."""
        details = {}
        if self.partner:
            details["partner"] = self.partner
        if self.chain:
            details["via"] = list(self.chain)
        return details

    def __str__(self):
        return self.describe() or "the host's own work"


HOST = Authority()  # the host's own work: a Director's cycle, an operator's command
