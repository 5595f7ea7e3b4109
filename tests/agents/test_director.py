"""The Director: one task per cycle, bounded retries, parse failures skipped, never two cycles."""

import json

import pytest

from a2a.models import A2AMessage
from agents import director as directors
from agents.models import AgentRun
from mcplet_host.locks import singleton
from mcplet_host.models import AuditEvent

pytestmark = pytest.mark.django_db

INSTRUCTION = {
    "target": "info-gathering-agent",
    "instruction": "Collect tomorrow's weather",
    "parameters": {"store": "shinjuku"},
}


def configure(director, script, turns):
    director.model = script({"director": turns})
    director.save()


def test_a_cycle_dispatches_one_task(director, script):
    configure(
        director,
        script,
        [{"expect": {"user_contains": ["Targets: info-gathering-agent"]}, "json": INSTRUCTION}],
    )
    cycle = directors.run_cycle("director")
    assert cycle.outcome == "ran"
    (request,) = A2AMessage.objects.all()
    assert (request.sender_id, request.recipient_id) == ("director", "info-gathering-agent")
    assert request.parameters == {"store": "shinjuku", "instruction": "Collect tomorrow's weather"}
    assert str(request.context_id) == cycle.context_id
    assert AuditEvent.objects.get(event_type="director.cycle.ran").actor_id == "director"


def test_a_fenced_answer_is_read_as_the_agents_read_theirs(director, script):
    fenced = "```json\n" + json.dumps(INSTRUCTION) + "\n```"
    configure(director, script, [{"text": fenced}])
    assert directors.run_cycle("director").outcome == "ran"


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ({"text": "Sure! I will collect the weather."}, "unparseable LLM output"),
        ({"json": {"target": "info-gathering-agent"}}, "'instruction' is a required property"),
        (
            {"json": {**INSTRUCTION, "pools": ["media-pool"]}},
            "Additional properties are not allowed",
        ),
        (
            {"json": {**INSTRUCTION, "target": "dispatch-agent"}},
            "not one of this Director's targets",
        ),
    ],
)
def test_an_unusable_answer_skips_the_cycle(director, script, answer, says):
    configure(director, script, [answer])
    cycle = directors.run_cycle("director")
    assert cycle.outcome == "skipped" and says in cycle.reason
    assert not A2AMessage.objects.exists()
    assert says in AuditEvent.objects.get(event_type="director.cycle.skipped").details["reason"]


def test_llm_failures_are_retried_a_bounded_number_of_times(director, script):
    director.max_retries = 2
    configure(director, script, [{"error": {"kind": "server", "times": 2}, "json": INSTRUCTION}])
    assert directors.run_cycle("director").outcome == "ran"

    A2AMessage.objects.all().delete()
    configure(
        director, script, [{"error": {"kind": "rate_limit", "times": 5}, "json": INSTRUCTION}]
    )
    cycle = directors.run_cycle("director")
    assert cycle.outcome == "failed" and "3 attempt(s)" in cycle.reason
    assert not A2AMessage.objects.exists()
    assert AuditEvent.objects.get(event_type="director.cycle.failed").result == "FAILURE"


def test_a_running_cycle_makes_the_next_trigger_skip(director, script):
    configure(director, script, [{"json": INSTRUCTION}])
    with singleton("director:director", 30) as held:
        assert held
        cycle = directors.run_cycle("director")
    assert cycle.outcome == "skipped" and "still running" in cycle.reason
    assert not A2AMessage.objects.exists()
    assert directors.run_cycle("director").outcome == "ran"  # the lock was released


def test_a_disabled_director_does_not_run(director, script):
    director.enabled = False
    configure(director, script, [{"json": INSTRUCTION}])
    assert directors.run_cycle("director").outcome == "skipped"
    assert not AgentRun.objects.exists()


def test_the_schedule_is_a_beat_periodic_task(director):
    task = director.schedule_cron("0 7 * * *")
    assert (task.task, task.args, str(task.crontab.hour)) == (
        "agents.run_director",
        '["director"]',
        "7",
    )
    with pytest.raises(ValueError, match="five fields"):
        director.schedule_cron("every morning")
