"""The built-in LLM agent (spec §3.4, §4.2, §8.2): the tool-use loop, action dispatch, result
approval and hand-off, driven from the durable AgentRun so any worker can continue it.

Each call to `advance()` moves a run as far as it can — until it finishes, or until it must
wait for a person (an approval), in which case the worker is released and the gateway's
continuation (`agents.resume_run`) calls `advance()` again later.

Everything the run does acts under its `authority` (the signed provenance of its task): the
LLM's tool list, its tool calls, the actions it proposes, its result's approval and the
hand-off it sends. What the LLM proposes is marked so: on the `app` surface the gateway holds
every such call for a person, whatever its type.
"""

import json
import logging
import secrets
from contextlib import suppress

import jsonschema
from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string

from a2a import bus
from agents import llm, remote, transcript
from agents.ending import finish
from agents.models import AgentRun, LeaseLost
from agents.toolset import Toolset
from held.kinds import result as held_result
from held.models import Asker, Ceremony
from mcplet_host import audit, gateway, kept, storable, tracing

log = logging.getLogger(__name__)

RESUME_TASK = "agents.resume_run"
OUTPUT_RETRIES = 1  # an answer that breaks the output schema is retried once, with the error
# A final answer the model did not finish (its `finish_reason`): partial when it was cut off.
CUT_OFF = {"length": "it reached its output limit", "content_filter": "its provider filtered it"}
CUT_OFF_CODE = "X_LLM_INCOMPLETE"


def start(request, agent):
    """The run of a task request, created with the delivery's mark (bus.deliver_once): None if
    another delivery marked the request first. It acts with the request's signed provenance,
    and nothing else, and is leased to this worker: a worker killed before its first step
    leaves a lease that expires, and `recover` takes the run up then."""
    now = timezone.now()
    return bus.deliver_once(
        request,
        AgentRun,
        request=request,
        agent=agent,
        provenance=request.provenance,
        context_id=str(request.context_id),
        otel_trace_id=tracing.trace_id(tracing.traceparent()),
        parameters=request.parameters,
        transcript=[] if agent.kind == agent.Kind.REMOTE else _opening(agent, request),
        lease_owner=secrets.token_hex(8),
        lease_until=AgentRun.lease_end(now),
    )


def _opening(agent, request):
    history = (request.body.get("payload") or {}).get("history") or []
    system = agent.system_prompt or f"You are {agent.display_name}."
    if agent.output_schema:
        system += (
            "\n\nAnswer with one JSON object matching this JSON Schema, and nothing else:\n"
            + json.dumps(agent.output_schema)
        )
    task = json.dumps(
        {"from": request.sender_id, "parameters": request.parameters}, ensure_ascii=False
    )
    return [
        {"role": "system", "content": system},
        *[{"role": m["role"], "content": m["content"]} for m in history],
        {"role": "user", "content": f"Your task:\n{task}"},
    ]


def advance(run_id):
    owner = secrets.token_hex(8)
    while AgentRun.claim(run_id, owner):  # else finished, waiting, or another worker holds it
        # Read once the lease is ours: whatever the worker before us saved is in it.
        run = kept.get_related(AgentRun, ("agent__hands_off_to", "request"), pk=run_id)
        if not _advance_leased(run, owner):
            return


def advance_started(run):
    """Advance the run `start` just gave this worker: it holds the lease, and the run is as
    committed, so its first pass needs neither a claim nor a read."""
    if _advance_leased(run, run.lease_owner):
        advance(run.pk)


def _advance_leased(run, owner):
    """Advance a run whose lease `owner` holds, then let the lease go. True if it must be
    taken up again at once."""
    lost = False
    with tracing.span(f"invoke_agent {run.agent.agent_id}", attributes=run.traced) as span:
        try:
            _advance(run)
        except LeaseLost:  # the run is another worker's now, or ended: nothing more to write
            lost = True
            log.warning("run %s: its lease was lost mid-pass; this worker stops", run.pk)
        except Exception as exc:  # the run must end with a response, whatever broke
            log.exception("run %s failed", run.pk)
            span.fail(type(exc).__qualname__, str(exc))
            error = {"message": f"{type(exc).__name__}: {exc}"}
            finish(run, AgentRun.Status.ERROR, error=error)
        finally:
            if not (lost or run.is_final):  # an ended run's lease went with its end (finish)
                run.release(owner)
        span.set_attribute("mcplet.run.status", run.status)
    # An approval that landed after this worker left the run waiting, and before it let go of
    # the lease, set the run running again but could not claim it: take it up here.
    return (
        not lost
        and run.status == AgentRun.Status.AWAITING_APPROVAL
        and AgentRun.objects.filter(pk=run.pk, status=AgentRun.Status.RUNNING).exists()
    )


def _advance(run):
    if run.agent.kind == run.agent.Kind.REMOTE:
        status, outcome = remote.RemoteCall(run).outcome()
        finish(run, status, **outcome)
    elif run.agent.handler:
        import_string(run.agent.handler)(run).advance()
    else:
        Loop(run).advance()


def resume(ceremony_id, ref):
    """The continuation of a held call or result: record its outcome, then advance the run. The
    run is read once, as `advance` claims it: a run no longer waiting (ended, or resumed by
    another continuation) is changed by neither statement before."""
    run_id, _, key = ref.partition(":")
    ceremony = kept.get(Ceremony, pk=ceremony_id)
    # A person's wait is a link to the span that held the call, never a span hours long.
    with tracing.span("resume_run", links_to=[ceremony.traceparent]):
        waiting = {"pk": run_id, "status": AgentRun.Status.AWAITING_APPROVAL}
        if kept.update(AgentRun, waiting, {"status": AgentRun.Status.RUNNING, "waiting_for": None}):
            log.info("run %s resumes after %s (%s)", run_id, key, ceremony.status)
        advance(run_id)


def _held(ref):
    """The call (or result) the run held under `ref` ("<run>:<place>"), or None: one, if any."""
    return next(iter(kept.rows(Ceremony, continuation_ref=ref)), None)


class Loop:
    def __init__(self, run):
        self.run, self.agent = run, run.agent
        self.approval = None  # the result's approval, once read

    # --- the state machine ---------------------------------------------------------------------

    def advance(self):
        run = self.run
        while run.status == AgentRun.Status.RUNNING:
            if self._answer_pending_tool_calls():
                return  # waiting for a person
            if run.result is not None:
                # A result that needs approval is approved before anything it proposes runs.
                if self._await_result_approval() or self._dispatch_actions():
                    return  # waiting for a person, or ended
                self._conclude()
                return
            if not self._think():
                return

    def _think(self):
        """One LLM turn. False when the run ended."""
        run, agent = self.run, self.agent
        if stop := run.why_stop(agent):
            status, error = stop
            finish(run, status, error=error)
            return False
        tools = Toolset(run).specs()
        try:
            reply = llm.complete(
                run.transcript,
                model=agent.model or settings.MCPLET_LLM_MODEL,
                tools=tools or None,
                agent_id=agent.agent_id,
            )
        except llm.LLMError as exc:
            if exc.tool_error is not None:
                # A script follows one path: a tool's refusal it did not plan for makes the
                # scripted model leave it, and the refusal is what the partner must read.
                log.info("run %s ends with its tool's error; the script said: %s", run.pk, exc)
                finish(run, AgentRun.Status.ERROR, error=exc.tool_error)
                return False
            status = (
                AgentRun.Status.TIMEOUT if "timeout" in str(exc).lower() else AgentRun.Status.ERROR
            )
            finish(run, status, error={"message": str(exc), "code": "X_LLM_ERROR"})
            return False
        run.steps += 1
        run.prompt_tokens += reply.usage.prompt_tokens
        run.completion_tokens += reply.usage.completion_tokens
        run.transcript.append(storable.printable(reply.raw_message))  # hostile text written out
        if not reply.tool_calls:
            self._read_answer(reply.text or "", reply.finish_reason)
            if run.is_final:  # its answer ended it (cut off, or the output schema broken again)
                return False
        run.keep(*AgentRun.TURN)  # only while the lease is this worker's, renewed with it
        return True

    def _read_answer(self, text, finish_reason=None):
        run, schema = self.run, self.agent.output_schema
        if why := CUT_OFF.get(finish_reason):  # not the answer: never handed on as one
            partial = finish_reason == "length"
            status = AgentRun.Status.PARTIAL if partial else AgentRun.Status.ERROR
            message = f"The model's answer is incomplete: {why}."
            result = {"answer": storable.printable(text)} if partial else None
            finish(run, status, result=result, error={"message": message, "code": CUT_OFF_CODE})
            return
        if not schema:
            try:
                answer = transcript.as_json(text)
            except ValueError:
                answer = None
            run.result = (
                answer if isinstance(answer, dict) else {"answer": storable.printable(text)}
            )
            return
        try:
            answer = transcript.as_json(text)
            jsonschema.validate(answer, schema)
        except (ValueError, jsonschema.ValidationError) as exc:
            problem = exc.message if isinstance(exc, jsonschema.ValidationError) else str(exc)
            if run.output_retries < OUTPUT_RETRIES:
                run.output_retries += 1
                run.transcript.append(
                    {
                        "role": "user",
                        "content": "Your answer does not match "
                        f"the output schema: {problem}. Answer again with the "
                        "JSON object only.",
                    }
                )
                return
            finish(
                run,
                AgentRun.Status.ERROR,
                error={
                    "message": f"The answer does not match the agent's output schema: {problem}",
                    "code": "VALIDATION_ERROR",
                },
            )
            return
        run.result = answer

    # --- tool calls ----------------------------------------------------------------------------

    def _answer_pending_tool_calls(self):
        """Run the last turn's unanswered tool calls through the gateway. True if one waits."""
        run, toolset, offered = self.run, None, None
        for place, call in transcript.unanswered(run.transcript):
            if toolset is None:  # what this turn was offered, before any of its calls loads more
                toolset = Toolset(run)
                offered = toolset.offered()
            ref = f"{run.pk}:{place}"
            ceremony = _held(ref)
            if ceremony is not None:  # this call was held: its outcome, or keep waiting
                if not ceremony.is_final:
                    return self._wait(ceremony)
                envelope = ceremony.result
            else:
                name, arguments = call["function"]["name"], call["function"].get("arguments")
                # Not JSON: the model's text goes on as it is, refused as no JSON object.
                with suppress(ValueError, RecursionError):
                    arguments = json.loads(arguments or "{}")
                if toolset.answers(name):  # a discovery meta-tool: the host's own answer
                    envelope = toolset.call(name, arguments)
                else:
                    self.run.may_hold()
                    outcome = gateway.call_tool(
                        self.agent,
                        name,
                        arguments,
                        "model",
                        run.context_id,
                        authority=run.authority,
                        proposed_by_model=True,
                        continuation=RESUME_TASK,
                        continuation_ref=ref,
                        offered=offered,
                    )
                    if outcome.status == "pending":
                        return self._wait(outcome.ceremony)
                    envelope = outcome.envelope
            run.transcript.append(transcript.tool_message(call, envelope))
            run.keep("transcript")
        return False

    # --- action dispatch (§4.2, §8.2) ------------------------------------------------------------

    def _dispatch_actions(self):
        """Proposed actions in the result go one by one through the gateway on the app surface,
        as proposals of the model: each is held for a person (its own ceremony, with its exact
        arguments) and runs only as approved. True while one waits."""
        run = self.run
        if not run.actions and not run.result.get("actions"):
            return False
        if not run.actions:
            proposed = run.result["actions"]
            if not isinstance(proposed, list) or not all(isinstance(a, dict) for a in proposed):
                message = "The proposed actions must be a list of objects ({tool, arguments})."
                finish(
                    run,
                    AgentRun.Status.ERROR,
                    error={"message": message, "code": "VALIDATION_ERROR"},
                )
                return True
            run.actions = [
                {
                    "tool": a.get("tool"),
                    "arguments": a.get("arguments") or {},
                    "why": a.get("why", ""),
                }
                for a in proposed
            ]
        for index, action in enumerate(run.actions):
            if "outcome" in action:
                continue
            ref = f"{run.pk}:action-{index}"
            ceremony = _held(ref)
            if ceremony is None:
                self.run.may_hold()
                outcome = gateway.call_tool(
                    self.agent,
                    action["tool"],
                    action["arguments"],
                    "app",
                    run.context_id,
                    authority=run.authority,
                    proposed_by_model=True,
                    continuation=RESUME_TASK,
                    continuation_ref=ref,
                )
                if outcome.status == "pending":
                    run.keep("actions")
                    return self._wait(outcome.ceremony)
                action["outcome"] = outcome.envelope
            elif ceremony.is_final:
                action["outcome"] = ceremony.result
            else:
                return self._wait(ceremony)
            run.keep("actions")
        return False

    # --- the end -------------------------------------------------------------------------------

    def _await_result_approval(self):
        """A result that needs a person's approval waits for it, proposed actions and all (none
        has run yet). True while it waits, or when it was declined (the run has ended)."""
        run, agent = self.run, self.agent
        if not agent.result_needs_approval:
            return False
        ref = f"{run.pk}:result"
        ceremony = _held(ref)
        if ceremony is None:
            asker = Asker(
                agent.agent_id,
                run.authority,
                trace_id=run.context_id,
                continuation=RESUME_TASK,
                continuation_ref=ref,
            )
            prompt = agent.approval_prompt or f"Approve the result of {agent.display_name}"
            self.run.may_hold()
            ceremony = held_result.hold(asker, run.result, prompt)
        self.approval = ceremony
        if not ceremony.is_final:
            return self._wait(ceremony)
        if ceremony.status != Ceremony.Status.EXECUTED:
            # Declined, not failed: the approver's Reject cancels the run, expiry times it out.
            status = DECLINED.get(ceremony.error.get("code"), AgentRun.Status.ERROR)
            finish(run, status, result=run.result, error=ceremony.error)
            return True
        return False

    def _conclude(self):
        run = self.run
        result = dict(run.result)
        if run.actions:
            done = [a for a in run.actions if "result" in (a.get("outcome") or {})]
            result["actions"] = run.actions
            result["dispatched"] = {"succeeded": len(done), "failed": len(run.actions) - len(done)}
        if self.agent.result_needs_approval:
            result["approvedAt"] = self.approval.result["approvedAt"]
        status, error = _dispatch_outcome(run.actions)
        finish(run, status, result=result, error=error)

    def _wait(self, ceremony):
        run = self.run
        run.status, run.waiting_for = AgentRun.Status.AWAITING_APPROVAL, ceremony
        run.keep("status", "waiting_for", "transcript", "actions")
        audit.record(
            "agent.run.awaiting_approval",
            actor_type=audit.ActorType.AGENT,
            actor_id=self.agent.agent_id,
            target_tool=ceremony.tool_name,
            result=audit.PENDING,
            trace_id=run.context_id,
            details={
                "run": str(run.pk),
                "ceremony": ceremony.token[:8],
                **run.authority.audit_details(),
            },
        )
        return True


# A held call a person declined did not fail: the run ends as what happened to it.
REJECTED_CODE = Ceremony.DECLINED[Ceremony.Status.REJECTED]
EXPIRED_CODE = Ceremony.DECLINED[Ceremony.Status.EXPIRED]
DECLINED = {REJECTED_CODE: AgentRun.Status.CANCELLED, EXPIRED_CODE: AgentRun.Status.TIMEOUT}


def _dispatch_outcome(actions):
    """A run's end from its dispatched actions: success when all succeeded, partial when some
    did; when none did, failed if one failed (it ran or was refused), else cancelled (the
    approver rejected) or timed out (nobody approved in time). The error names the first
    action that did not succeed, a failure before a decline."""
    missed = [a for a in actions if "result" not in (a.get("outcome") or {})]
    if not missed:
        return AgentRun.Status.SUCCESS, None
    errors = [(a["tool"], (a.get("outcome") or {}).get("error") or {}) for a in missed]
    failed = [(tool, e) for tool, e in errors if e.get("code") not in DECLINED]
    tool, first = (failed or errors)[0]
    message = f"{tool}: {first.get('message', '')}"
    if len(missed) > 1:
        message = f"{len(missed)} of {len(actions)} actions did not succeed; first {message}"
    error = {"code": first.get("code", ""), "message": message}
    if len(missed) < len(actions):
        return AgentRun.Status.PARTIAL, error
    if failed:
        return AgentRun.Status.ERROR, error
    rejected = any(e.get("code") == REJECTED_CODE for _, e in errors)
    return AgentRun.Status.CANCELLED if rejected else AgentRun.Status.TIMEOUT, error
