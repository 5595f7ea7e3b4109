"""A run's hand-off (`Agent.hands_off_to`): its target comes with the run's agent, as the
delivery read it from the kept registry, and its own delivery checks it again against the
registry as it is then — a target disabled meanwhile is refused there, and nothing runs. The
worker whose task ended the run delivers the hand-off itself, after its commit (no broker
between the hops), up to MCPLET_HAND_OFFS_HERE in a row."""

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models.signals import post_save
from django.test.utils import CaptureQueriesContext

from a2a import bus
from a2a.models import A2AMessage
from agents import ending, runner
from agents.models import Agent, AgentRun
from agents.tasks import deliver
from mcplet_host import registry as kept_registry
from mcplet_host.celery import app
from mcplet_host.models import AuditEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]


@pytest.fixture
def chain(registry, director, script):
    """info → planning, each answering at once (planning would call query_crm first)."""
    info, planning = registry["info"], registry["planning"]
    info.model = script(
        {
            "info-gathering-agent": [{"json": {"analysis": "rain"}}] * 2,
            "planning-agent": [
                {"tool_calls": [{"name": "query_crm", "arguments": {"filter": "rain"}}]},
                {"json": {"plan": "dessert"}},
            ]
            * 2,
        }
    )
    planning.model, info.hands_off_to = info.model, planning
    info.save()
    planning.save()
    return info, planning


def test_a_delivery_that_hands_off_reads_no_agent_row(chain, calls):
    bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})  # warms the registry
    with CaptureQueriesContext(connection) as statements:
        bus.send_task("director", "info-gathering-agent", {"store": "ikebukuro"})
    runs = AgentRun.objects.filter(agent__agent_id="planning-agent")
    assert [r.status for r in runs] == [AgentRun.Status.SUCCESS] * 2
    assert len(calls("query_crm")) == 2
    agents_table = connection.ops.quote_name(Agent._meta.db_table)
    read = [q["sql"] for q in statements.captured_queries if f"FROM {agents_table}" in q["sql"]]
    assert read == []


def assert_refused_at_its_delivery():
    """The hand-off to planning was refused, audited, and planning has no run."""
    hand_off = A2AMessage.objects.get(type="task_request", sender_id="info-gathering-agent")
    refused = AuditEvent.objects.get(event_type="a2a.message.refused")
    assert refused.details["messageId"] == str(hand_off.message_id)
    assert "'planning-agent' is disabled" in refused.details["reason"]
    assert hand_off.state == A2AMessage.State.REFUSED
    assert not AgentRun.objects.filter(agent__agent_id="planning-agent").exists()


def test_a_target_disabled_while_its_sender_ran_is_refused_at_its_delivery(chain, calls):
    info, _ = chain
    app.conf.task_always_eager = False  # the worker is this test until the sender ends
    request = bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})
    delivered = kept_registry.current().agents({info.agent_id})[info.agent_id]
    run = runner.start(request, delivered)  # as the delivery started it
    Agent.objects.filter(agent_id="planning-agent").update(enabled=False)  # meanwhile

    app.conf.task_always_eager = True
    assert ending.finish(run, AgentRun.Status.SUCCESS, result={"analysis": "rain"})

    assert_refused_at_its_delivery()
    assert calls() == []  # planning never ran: its server saw nothing


def test_a_target_disabled_before_its_sender_started_is_refused_too_never_dropped(chain, calls):
    """Disabled before the sender's run: the hand-off is still sent, and refused at its
    delivery, where the workflow shows why (it was dropped with no event)."""
    Agent.objects.filter(agent_id="planning-agent").update(enabled=False)
    request = bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})
    assert AgentRun.objects.get(request=request).status == AgentRun.Status.SUCCESS
    assert_refused_at_its_delivery()
    assert calls() == []


@pytest.fixture
def no_worker():
    """Tasks are not run at once: what is queued to the broker stays there, and the test calls
    the worker's agents.deliver task itself."""
    app.conf.task_always_eager = False


def _delivered_by_a_worker(request):
    deliver(str(request.message_id), request.signature)


def test_the_worker_that_ends_a_run_delivers_its_hand_off(chain, calls, no_worker):
    request = bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})
    _delivered_by_a_worker(request)

    run = AgentRun.objects.get(agent__agent_id="planning-agent")
    assert (run.status, run.result) == (AgentRun.Status.SUCCESS, {"plan": "dessert"})
    assert run.authority.chain == ("director", "info-gathering-agent")
    hand_off = A2AMessage.objects.get(type="task_request", sender_id="info-gathering-agent")
    assert hand_off.state == A2AMessage.State.ANSWERED
    assert [c["arguments"] for c in calls("query_crm")] == [{"filter": "rain"}]


def test_with_no_hand_offs_here_the_hand_off_waits_for_the_broker(
    chain, calls, settings, no_worker
):
    settings.MCPLET_HAND_OFFS_HERE = 0
    request = bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})
    _delivered_by_a_worker(request)

    assert AgentRun.objects.get(agent__agent_id="info-gathering-agent").is_final
    hand_off = A2AMessage.objects.get(type="task_request", sender_id="info-gathering-agent")
    assert hand_off.state == A2AMessage.State.QUEUED
    assert not AgentRun.objects.filter(agent__agent_id="planning-agent").exists()
    assert calls() == []


def test_a_hand_off_delivered_here_is_checked_as_the_broker_s_would_be(chain, calls, no_worker):
    def disable_planning(sender, instance, created, **kwargs):  # an operator, meanwhile
        if created and instance.sender_id == "info-gathering-agent":
            Agent.objects.filter(agent_id="planning-agent").update(enabled=False)

    request = bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})
    post_save.connect(disable_planning, sender=A2AMessage)
    try:
        _delivered_by_a_worker(request)
    finally:
        post_save.disconnect(disable_planning, sender=A2AMessage)

    assert_refused_at_its_delivery()
    assert calls() == []


def test_a_hand_off_that_leads_back_is_refused_when_saved(registry):
    info, planning = registry["info"], registry["planning"]
    info.hands_off_to = planning
    info.save()
    planning.hands_off_to = info
    with pytest.raises(ValidationError) as refused:
        planning.full_clean()
    assert refused.value.message_dict["hands_off_to"] == [
        "It leads back here: planning-agent → info-gathering-agent → planning-agent."
    ]
    planning.hands_off_to = planning
    with pytest.raises(ValidationError, match="planning-agent → planning-agent"):
        planning.full_clean()
    planning.hands_off_to = registry["dispatch"]
    planning.full_clean()  # a chain that ends is fine
