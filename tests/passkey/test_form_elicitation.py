"""A server's form request during a call (`elicitation/create`, form mode): a person answers
a form built from the requested schema on the call's page, the answer reaches the server, and
nobody answering in time, a refused answer or a schema the host cannot show declines — never an
LLM answering, each step audited."""

import threading
import time

import pytest
from django.test import Client

from held.models import Ceremony
from mcplet_host import gateway
from mcplet_host.authority import Authority
from mcplet_host.models import AuditEvent
from tests.conftest import entry
from tests.passkey.conftest import ASK

pytestmark = pytest.mark.django_db(transaction=True)  # the call waits in its own thread

AUTHORITY = Authority("partner-bot", ("director",))


class Call(threading.Thread):
    """The agent's call, waiting in a worker thread as it would in Celery."""

    def __init__(self, agent, tool="book_table"):
        super().__init__(daemon=True)
        self.agent, self.tool, self.outcome = agent, tool, None
        self.start()

    def run(self):
        from django.db import connections

        try:
            self.outcome = gateway.call_tool(
                self.agent, self.tool, {"day": "friday"}, trace="ctx-form", authority=AUTHORITY
            )
        finally:
            connections.close_all()

    def result(self):
        self.join(30)
        assert not self.is_alive()
        return self.outcome.envelope.get("result", self.outcome.envelope)


def held_form(call, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and call.is_alive():
        if form := Ceremony.objects.filter(kind=Ceremony.Kind.FORM).first():
            return form
        time.sleep(0.05)
    raise AssertionError("no form was held")


def events(name):
    return list(AuditEvent.objects.filter(event_type=name).values_list("details", flat=True))


def elicited(calls):
    return [c["elicited"] for c in calls("book_table") if "elicited" in c]


ANSWER = {"action": "accept", "email": "kim@example.kr", "guests": "4", "seating": "terrace"}


def test_a_persons_answer_reaches_the_server(asking_server, calls, approver_client):
    call = Call(asking_server())
    form = held_form(call)

    page = approver_client.get(form.get_absolute_url())
    assert page.status_code == 200
    html = page.content.decode()
    assert "Who should the restaurant contact?" in html
    assert "planning-agent" in html and "partner-bot" in html and "book_table" in html
    assert 'name="guests"' in html and 'value="terrace"' in html
    assert (form.tool_name, form.agent_id, form.authority) == (
        "book_table",
        "planning-agent",
        AUTHORITY,
    )

    response = approver_client.post(f"{form.get_absolute_url()}answer/", ANSWER)
    assert response.status_code == 302

    answer = {
        "action": "accept",
        "content": {
            "email": "kim@example.kr",
            "guests": 4,
            "seating": "terrace",
            "vegetarian": False,
        },
    }
    assert call.result() == {"elicited": answer}
    assert elicited(calls) == [answer]  # the server's own log
    form.refresh_from_db()
    assert form.status == Ceremony.Status.EXECUTED
    assert [e["ceremony"] for e in events("mcplet.elicitation.requested")] == [form.token[:8]]
    (answered,) = events("mcplet.elicitation.answered")
    assert answered["action"] == "accept" and answered["partner"] == "partner-bot"
    assert "kim@example.kr" not in str(answered)  # field names only, never the values


def test_nobody_answering_in_time_declines(asking_server, calls, settings):
    settings.MCPLET_ELICITATION_WAIT = 1
    call = Call(asking_server())
    assert call.result() == {"elicited": {"action": "decline"}}
    assert elicited(calls) == [{"action": "decline"}]
    form = Ceremony.objects.get(kind=Ceremony.Kind.FORM)
    assert form.status == Ceremony.Status.EXPIRED
    assert [e["action"] for e in events("mcplet.elicitation.expired")] == ["decline"]


def test_refused_answers_leave_the_form_waiting_then_the_person_declines(
    asking_server, calls, approver, approver_client, django_user_model
):
    call = Call(asking_server())
    form = held_form(call)
    url = f"{form.get_absolute_url()}answer/"

    outsider = Client()
    outsider.force_login(django_user_model.objects.create_user("viewer", "v@example.org", "pw"))
    assert outsider.post(url, ANSWER).status_code == 403
    assert outsider.get(form.get_absolute_url()).status_code == 403
    assert Client().post(url, ANSWER).status_code == 401

    no_csrf = Client(enforce_csrf_checks=True)
    no_csrf.force_login(approver)
    assert no_csrf.post(url, ANSWER).status_code == 403

    invalid = approver_client.post(url, ANSWER | {"guests": "40", "seating": "roof"})
    assert invalid.status_code == 400
    assert approver_client.post(url, {"action": "answer-for-me"}).status_code == 400
    refused = [e["reason"] for e in events("mcplet.passkey.refused") if e["stage"] == "answer"]
    assert sorted(refused) == ["malformed"] * 2 + ["not_an_approver"] * 2
    assert not form.approve(approver)  # a form is answered, never approved into a call
    form.refresh_from_db()
    assert form.status == Ceremony.Status.PENDING
    assert elicited(calls) == []  # the server heard nothing yet

    assert approver_client.post(url, {"action": "decline"}).status_code == 302
    assert call.result() == {"elicited": {"action": "decline"}}
    assert elicited(calls) == [{"action": "decline"}]
    assert approver_client.post(url, ANSWER).status_code == 410  # answered once


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"address": {"type": "object"}}},
        {"type": "object", "properties": {"name": {"type": "string", "default": "a\u0000b"}}},
    ],
)
def test_a_form_the_host_cannot_show_is_declined_unasked(asking_server, calls, schema):
    call = Call(asking_server({"message": "Tell me", "requestedSchema": schema}))
    assert call.result() == {"elicited": {"action": "decline"}}
    assert not Ceremony.objects.filter(kind=Ceremony.Kind.FORM).exists()
    (declined,) = events("mcplet.elicitation.declined")
    assert declined["agent"] == "planning-agent" and declined["reason"]


def test_the_persons_time_is_not_counted_in_the_calls_timeout(
    asking_server, calls, approver_client, settings
):
    agent = asking_server(ASK, entry("site_stats", pool="bistro-pool"))
    Call(agent, "site_stats").result()  # the session is open: the timeout is the call's own
    settings.MCPLET_TOOL_TIMEOUT = 1
    call = Call(agent)
    form = held_form(call)
    time.sleep(2)  # longer than the call may take by itself
    approver_client.post(f"{form.get_absolute_url()}answer/", {"action": "decline"})
    assert call.result() == {"elicited": {"action": "decline"}}


def test_a_form_asked_while_several_calls_are_in_flight_is_declined(asking_server, calls):
    slow = entry("slow_stats", pool="bistro-pool") | {"sleep": 4}
    agent = asking_server(ASK, slow)
    other = Call(agent, "slow_stats")
    while not calls("slow_stats"):  # it runs on the same session
        time.sleep(0.05)
    call = Call(agent)
    # Which call the request is for cannot be told: nobody is asked, the server is declined.
    assert call.result() == {"elicited": {"action": "decline"}}
    assert other.result() == {"ok": True, "tool": "slow_stats", "arguments": {"day": "friday"}}
    assert not Ceremony.objects.filter(kind=Ceremony.Kind.FORM).exists()
    reasons = [e["reason"] for e in events("mcplet.elicitation.declined")]
    assert reasons == ["several calls in flight on the session"] * 2  # told on either call
