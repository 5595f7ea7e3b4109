"""A run's lease over a whole pass: each step renews it, so a pass longer than the lease keeps
its run; and a worker whose lease ran out mid-pass (an LLM turn slower than the lease) and whose
run another worker took up writes nothing more: the run ends once and hands off once.

The second worker is beat's recovery (`agents.recover`), run eagerly from inside the first
worker's LLM turn, once the first worker's lease has run out."""

from datetime import timedelta

import pytest
from django.utils import timezone

from a2a import bus
from a2a.models import A2AMessage
from agents import llm
from agents.models import AgentRun
from agents.tasks import recover
from mcplet_host import audit
from mcplet_host.models import AuditEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

LONG_AGO = timedelta(hours=1)
# What the first worker's LLM says, once its slow turn returns.
STALE = {
    "an answer": {"json": {"analysis": "sun"}},
    "a tool call": {"tool_calls": [{"name": "query_crm", "arguments": {"filter": "sun"}}]},
}


@pytest.fixture
def chain(registry, director, script):
    """info → planning, each answering at once."""
    info, planning = registry["info"], registry["planning"]
    info.model = script(
        {
            "info-gathering-agent": [{"json": {"analysis": "rain"}}],
            "planning-agent": [{"json": {"plan": "dessert"}}],
        }
    )
    planning.model, info.hands_off_to = info.model, planning
    info.save()
    planning.save()
    return info


@pytest.mark.parametrize("stale", STALE)
def test_a_worker_whose_lease_ran_out_mid_pass_writes_nothing_more(
    chain, script, calls, monkeypatch, stale
):
    stale_model = script({"info-gathering-agent": [STALE[stale]]}, name="stale")
    complete, turns, taken_up = llm.complete, [], {}

    def slow_first_turn(messages, *, model, agent_id, **kwargs):
        turns.append(agent_id)
        if turns != ["info-gathering-agent"]:
            return complete(messages, model=model, agent_id=agent_id, **kwargs)
        # The first worker's turn outlasts its lease; beat finds the run stalled and a second
        # worker takes it up, ends it and hands it off, while this turn still runs.
        run = AgentRun.objects.get(agent__agent_id=agent_id)
        expired = {"lease_until": timezone.now() - timedelta(seconds=1)}
        AgentRun.objects.filter(pk=run.pk).update(updated_at=timezone.now() - LONG_AGO, **expired)
        recover()
        taken_up.update(AgentRun.objects.filter(pk=run.pk).values().get())
        return complete(messages, model=stale_model, agent_id=agent_id, **kwargs)

    monkeypatch.setattr(llm, "complete", slow_first_turn)

    request = bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})

    run = AgentRun.objects.get(request=request)
    assert turns == ["info-gathering-agent"] * 2 + ["planning-agent"]
    # As the second worker left it: the first one's turn, save and end changed nothing.
    assert AgentRun.objects.filter(pk=run.pk).values().get() == taken_up
    assert (run.status, run.result, run.steps) == ("success", {"analysis": "rain"}, 1)
    assert "rain" in run.transcript[-1]["content"]
    assert calls("query_crm") == []  # the first worker stopped before its tool call
    finished = AuditEvent.objects.filter(event_type="agent.run.finished", details__run=str(run.pk))
    assert finished.count() == 1
    [response] = A2AMessage.objects.filter(reply_to=request.message_id)
    assert response.body["payload"]["result"] == {"analysis": "rain"}
    [hand_off] = A2AMessage.objects.filter(type="task_request", sender_id="info-gathering-agent")
    assert hand_off.body["payload"]["parameters"] == {"analysis": "rain"}
    [planned] = AgentRun.objects.filter(agent__agent_id="planning-agent")
    assert (planned.status, planned.result) == ("success", {"plan": "dessert"})
    assert audit.verify_chain()[1] is None


def test_each_step_of_a_pass_renews_its_lease(registry, director, script, settings, monkeypatch):
    """A pass of three LLM turns and two tool calls, each turn started with a lease renewed
    since the one before: a pass longer than the lease keeps its run, if no step is."""
    settings.MCPLET_RUN_LEASE = 20
    planning = registry["planning"]
    planning.model = script(
        {
            "planning-agent": [
                {"tool_calls": [{"name": "query_crm", "arguments": {"filter": "rain"}}]},
                {"tool_calls": [{"name": "query_crm", "arguments": {"filter": "sun"}}]},
                {"json": {"plan": "dessert"}},
            ]
        }
    )
    planning.save()
    complete, leases = llm.complete, []

    def turn(messages, **kwargs):
        held = AgentRun.objects.values_list("lease_until", "lease_owner").get()
        leases.append((timezone.now(), *held))
        return complete(messages, **kwargs)

    monkeypatch.setattr(llm, "complete", turn)

    request = bus.send_task("director", "planning-agent", {"store": "shinjuku"})

    assert AgentRun.objects.get(request=request).status == AgentRun.Status.SUCCESS
    assert len(leases) == 3 and len({owner for _, _, owner in leases}) == 1  # one pass
    for (_, before, _), (at, after, _) in zip(leases, leases[1:], strict=False):
        assert after > before  # renewed since the last turn
        assert after - at > timedelta(seconds=19)  # a whole lease ahead of this turn
