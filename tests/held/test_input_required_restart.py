"""A 2026-07-28 form survives a restart of every host process that touched it: an agent's run,
on a real worker, calls a tool whose server answers `input_required` with a form; the worker is
killed and the web process stopped while the form waits; on new ones the approver answers the
form over HTTP, a worker that never saw the call sends it again — same arguments, the answer and
the server's `requestState`, once, proved from the server's own call log — and the waiting run
goes on to its end. The state is in no process's log."""

import json
import re
import signal

import httpx
import pytest
from django.conf import settings
from django.test import Client

from a2a import bus
from a2a.models import A2AMessage
from agents.models import Agent, AgentRun
from held.models import Ceremony
from mcplet_host.models import AuditEvent
from tests import processes
from tests.held.conftest import WHICH_TABLE

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

SCRIPT = {
    "planning-agent": [
        {"tool_calls": [{"name": "book_table", "arguments": {"day": "friday"}}]},
        {"expect": {"tool_results_contain": ["terrace"]}, "json": {"booked": "terrace"}},
    ]
}


def kill(process):
    process.send_signal(signal.SIGKILL)  # no shutdown handler gets to save anything
    process.wait(10)


def answer_over_http(base, approver, held, answer):
    """The approver answers on the web process's form page, as a browser would: the page, its
    CSRF token, the POST."""
    session = Client()
    session.force_login(approver)
    cookie = session.cookies[settings.SESSION_COOKIE_NAME].value
    with httpx.Client(base_url=base, cookies={settings.SESSION_COOKIE_NAME: cookie}) as browser:
        page = browser.get(held.get_absolute_url())
        assert page.status_code == 200 and "Which table?" in page.text, page.text[:500]
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        posted = browser.post(
            f"{held.get_absolute_url()}answer/",
            data={"csrfmiddlewaretoken": token, **answer},
            headers={"Referer": base + held.get_absolute_url()},
        )
        assert posted.status_code == 302, posted.text[:500]


def test_a_form_waits_through_a_restart_of_every_host_process(
    bistro, calls, approver, script, tmp_path
):
    planning = bistro(WHICH_TABLE, transport="http")  # the server outlives the host's processes
    planning.model = script(SCRIPT)
    planning.save()
    Agent.objects.create(agent_id="director", display_name="Director", kind=Agent.Kind.DIRECTOR)
    scripts = {"MCPLET_SCRIPT_DIRS": str(tmp_path)}

    # 1. The run, on a real worker, reaches the form; the web process serves its page.
    web = processes.daphne(tmp_path / "web-1.log")
    worker = processes.celery_worker(tmp_path / "worker-1.log", "first", **scripts)
    with web, worker as first:
        request = bus.send_task("director", "planning-agent", {"store": "shinjuku"})
        processes.wait_until(
            lambda: (
                AgentRun.objects.filter(request=request)
                .exclude(status=AgentRun.Status.RUNNING)
                .exists()
            ),
            "the run to wait for the form",
        )
        run = AgentRun.objects.get(request=request)
        assert run.status == AgentRun.Status.AWAITING_APPROVAL, (run.status, run.error)
        kill(first)  # 2. every host process goes while the form waits: the worker that held
        # the call is killed, the web process stopped as the block ends
    run.refresh_from_db()
    held = run.waiting_for
    assert (held.kind, held.status) == (Ceremony.Kind.INPUT_FORM, Ceremony.Status.PENDING)
    state = held.input_round["requestState"]
    assert state and len(calls("book_table")) == 1

    # 3. New processes: the answer on the new web process, the retry by a new worker.
    answer = {"action": "accept", "seating": "terrace", "guests": "4"}
    web = processes.daphne(tmp_path / "web-2.log")
    worker = processes.celery_worker(tmp_path / "worker-2.log", "second", **scripts)
    with web as base, worker:
        answer_over_http(base, approver, held, answer)
        # A new worker warms up (the LLM client, the servers' sessions) before it takes the
        # retry: under the whole suite's load on 2 cores this wait once passed a minute.
        processes.wait_until(
            lambda: AgentRun.objects.get(pk=run.pk).is_final, "the run to end", timeout=150
        )

    run.refresh_from_db()
    held.refresh_from_db()
    assert held.status == Ceremony.Status.EXECUTED, held.result
    assert run.status == AgentRun.Status.SUCCESS, run.error
    assert run.result == {"booked": "terrace"}
    reply = A2AMessage.objects.get(reply_to=request.message_id).body
    assert reply["status"] == "success"

    # The server's own log: the first call, then exactly one retry of the same call carrying
    # the answer and the state the server gave (its boundary refuses any other).
    first_call, retry = calls("book_table")
    assert first_call["arguments"] == retry["arguments"] == {"day": "friday"}
    assert first_call["requestState"] is None and first_call["inputResponses"] is None
    assert json.loads(retry["requestState"])["round"] == 1
    content = {"seating": "terrace", "guests": 4}
    assert retry["inputResponses"] == {"table": {"action": "accept", "content": content}}

    events = list(
        AuditEvent.objects.filter(trace_id=run.context_id).values_list("event_type", flat=True)
    )
    for kind in ("requested", "answered", "retried"):
        assert events.count(f"mcplet.elicitation.{kind}") == 1, events
    logs = {p.name: p.read_text() for p in tmp_path.glob("*-[12].log")}
    assert len(logs) == 4
    for name, text in logs.items():
        assert state not in text and "Traceback" not in text, name
