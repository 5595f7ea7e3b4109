"""The Director (spec §3.4, §16.2): on each trigger, render its prompt template, ask the LLM
for one task instruction, and dispatch it on the local bus — never two cycles at once, with
bounded retries, and nothing the LLM says can change the template, the targets or the pools."""

import json
from dataclasses import dataclass
from datetime import timedelta

import jsonschema
from django.conf import settings
from django.template import Context, Template
from django.utils import timezone

from a2a import bus
from agents import llm, transcript
from agents.models import Agent
from mcplet_host import audit
from mcplet_host.celery import enqueue
from mcplet_host.locks import singleton

INSTRUCTION_SCHEMA = {
    "type": "object",
    "required": ["target", "instruction"],
    "properties": {
        "target": {"type": "string"},
        "instruction": {"type": "string", "minLength": 1},
        "parameters": {"type": "object"},
    },
    "additionalProperties": False,
}


@dataclass
class Cycle:
    outcome: str  # ran | skipped | queued | failed
    reason: str = ""
    message_id: str = ""
    context_id: str = ""

    def __str__(self):
        detail = f": {self.reason}" if self.reason else ""
        sent = f" (task {self.message_id}, context {self.context_id})" if self.message_id else ""
        return f"{self.outcome}{detail}{sent}"


def run_cycle(agent_id):
    director = Agent.objects.get(agent_id=agent_id, kind=Agent.Kind.DIRECTOR)
    if not director.enabled:
        return _record(director, Cycle("skipped", "the Director is disabled"))
    with singleton(f"director:{director.agent_id}", director.lock_timeout) as held:
        if not held:
            if director.overlap_policy == "queue":
                enqueue(
                    "agents.run_director", [agent_id], countdown=max(1.0, director.backoff_seconds)
                )
                return _record(director, Cycle("queued", "a cycle is still running"))
            return _record(director, Cycle("skipped", "a cycle of this Director is still running"))
        return _record(director, _cycle(director))


def _cycle(director):
    targets = {t.agent_id: t for t in director.targets.filter(enabled=True)}
    today = timezone.localdate()
    prompt = Template(director.prompt_template).render(
        Context(
            {
                "today": today,
                "tomorrow": today + timedelta(days=1),
                "targets": sorted(targets),
                "director": director,
            }
        )
    )
    system = (
        f"{director.system_prompt}\n\nAnswer with one JSON object: "
        '{"target": <one of ' + json.dumps(sorted(targets)) + '>, "instruction": <text>, '
        '"parameters": <object>} and nothing else.'
    ).strip()
    try:
        reply = llm.complete(
            [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
            model=director.model or settings.MCPLET_LLM_MODEL,
            agent_id=director.agent_id,
            max_retries=director.max_retries,
            backoff=director.backoff_seconds,
        )
    except llm.LLMError as exc:
        return Cycle("failed", f"the LLM failed after {exc.attempts} attempt(s): {exc}")
    try:
        instruction = transcript.as_json(reply.text or "")  # fenced or not, as agents read
        jsonschema.validate(instruction, INSTRUCTION_SCHEMA)
    except (ValueError, jsonschema.ValidationError) as exc:
        problem = getattr(exc, "message", str(exc))
        excerpt = (reply.text or "")[:200]
        return Cycle("skipped", f"unparseable LLM output ({problem}): {excerpt!r}")
    if instruction["target"] not in targets:
        return Cycle(
            "skipped",
            f"the LLM chose {instruction['target']!r}, which is not one of "
            f"this Director's targets ({', '.join(sorted(targets)) or 'none'})",
        )
    parameters = {**instruction.get("parameters", {}), "instruction": instruction["instruction"]}
    sent = bus.send_task(director.agent_id, instruction["target"], parameters)
    return Cycle("ran", message_id=str(sent.message_id), context_id=str(sent.context_id))


def _record(director, cycle):
    audit.record(
        f"director.cycle.{cycle.outcome}",
        actor_type=audit.ActorType.AGENT,
        actor_id=director.agent_id,
        result={"ran": audit.SUCCESS, "failed": audit.FAILURE}.get(cycle.outcome, audit.BLOCKED),
        trace_id=cycle.context_id,
        details={"reason": cycle.reason, "messageId": cycle.message_id},
    )
    return cycle
