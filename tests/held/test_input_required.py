"""MCP 2026-07-28's `input_required` as held calls: a URL step or a form a server asks for
before it answers is held for a person (no worker waits); done or answered, the same call goes
to the server once more with the answers and the server's `requestState` — proved from the
server's own call log — and cancelled, declined or expired, nothing more is sent. The state
never reaches a page or the audit, and never travels with another call."""

import json

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from held.models import Ceremony
from held.tasks import expire_ceremonies
from mcplet_host.models import AuditEvent
from pools.sessions import sessions
from tests import processes
from tests.conftest import STRICT
from tests.held.conftest import ARGUMENTS, SAMPLING, SIGN_IN, WHICH_TABLE, book
from tests.passkey.conftest import post_assertion, sign

ACCEPTED = {"action": "accept"}

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]


def sent(calls):
    return calls("book_table")


def echoed(call):
    """The requestState a call echoed, as the server unsealed it (its boundary refuses any
    state it did not mint for this call: a retry that got through carried the right one)."""
    return json.loads(call["requestState"]) if call["requestState"] else None


def audit_text():
    return json.dumps(list(AuditEvent.objects.values("details", "event_type")))


def test_a_url_step_is_held_then_sent_again_once_with_the_state(
    bistro, calls, approver_client, staff_client
):
    outcome = book(bistro(SIGN_IN))

    assert outcome.status == "pending"
    held = outcome.ceremony
    assert (held.kind, held.status) == (Ceremony.Kind.STEP_UP, Ceremony.Status.PENDING)
    (step,) = held.elicitations
    assert step["domain"] == "book.bistro.example" and step["inputKey"] == "login"
    assert len(sent(calls)) == 1
    state = held.input_round["requestState"]
    assert state  # kept sealed on the row, never shown
    page = approver_client.get(held.get_absolute_url()).content.decode()
    assert "book.bistro.example" in page and state not in page
    admin = staff_client.get(f"/admin/held/ceremony/{held.pk}/change/")
    assert admin.status_code == 200 and state not in admin.content.decode()
    with connection.cursor() as cursor:  # sealed at rest
        cursor.execute("SELECT input_round FROM passkey_ceremony WHERE id = %s", [held.pk])
        assert state not in cursor.fetchone()[0]

    response = approver_client.post(f"{held.get_absolute_url()}step/", {"action": "finished"})
    assert response.status_code == 302

    held.refresh_from_db()
    assert held.status == Ceremony.Status.EXECUTED, held.result
    first, retry = sent(calls)  # exactly one retry
    assert first["requestState"] is None and first["inputResponses"] is None
    assert retry["arguments"] == first["arguments"] == ARGUMENTS
    assert echoed(retry)["round"] == 1
    assert retry["inputResponses"] == {"login": {"action": "accept"}}
    assert held.result["result"]["inputResponses"] == {"login": {"action": "accept"}}
    assert state not in audit_text()
    kinds = list(
        AuditEvent.objects.filter(trace_id="ctx-round").values_list("event_type", flat=True)
    )
    assert "mcplet.stepup.held" in kinds and "mcplet.stepup.retried" in kinds


def test_a_form_is_answered_on_its_page_and_the_answer_goes_with_the_retry(
    bistro, calls, approver_client
):
    held = book(bistro(WHICH_TABLE)).ceremony
    assert (held.kind, held.status) == (Ceremony.Kind.INPUT_FORM, Ceremony.Status.PENDING)
    page = approver_client.get(held.get_absolute_url())
    html = page.content.decode()
    assert page.status_code == 200 and "Which table?" in html and 'name="guests"' in html
    assert "partner-bot" in html and held.input_round["requestState"] not in html

    answer = {"action": "accept", "seating": "terrace", "guests": "4"}
    assert approver_client.post(f"{held.get_absolute_url()}answer/", answer).status_code == 302

    held.refresh_from_db()
    assert held.status == Ceremony.Status.EXECUTED, held.result
    first, retry = sent(calls)
    content = {"seating": "terrace", "guests": 4}
    assert retry["inputResponses"] == {"table": {"action": "accept", "content": content}}
    assert echoed(retry)["round"] == 1
    (answered,) = AuditEvent.objects.filter(event_type="mcplet.elicitation.answered")
    assert answered.details["fields"] == ["guests", "seating"] and "terrace" not in audit_text()
    assert AuditEvent.objects.filter(event_type="mcplet.elicitation.retried").count() == 1


@pytest.mark.parametrize("end", ["decline", "cancel", "expiry"])
def test_a_form_declined_cancelled_or_expired_sends_nothing_more(
    bistro, calls, approver_client, end
):
    held = book(bistro(WHICH_TABLE)).ceremony
    if end == "expiry":
        Ceremony.objects.filter(pk=held.pk).update(expires_at=timezone.now())
        expire_ceremonies()
    else:
        approver_client.post(f"{held.get_absolute_url()}answer/", {"action": end})

    held.refresh_from_db()
    expected = Ceremony.Status.EXPIRED if end == "expiry" else Ceremony.Status.REJECTED
    assert held.status == expected
    assert held.error["code"] in ("X_APPROVAL_REJECTED", "X_APPROVAL_EXPIRED")
    assert "not sent again" in held.error["message"]
    assert len(sent(calls)) == 1
    assert not AuditEvent.objects.filter(event_type__endswith=".retried").exists()


def test_a_cancelled_step_sends_nothing_more(bistro, calls, approver_client):
    held = book(bistro(SIGN_IN)).ceremony
    approver_client.post(f"{held.get_absolute_url()}step/", {"action": "cancel"})
    held.refresh_from_db()
    assert held.status == Ceremony.Status.REJECTED and len(sent(calls)) == 1


def test_a_second_round_holds_a_new_step_for_the_same_waiter(bistro, calls, approver_client):
    held = book(bistro(SIGN_IN, WHICH_TABLE)).ceremony
    approver_client.post(f"{held.get_absolute_url()}step/", {"action": "finished"})

    held.refresh_from_db()
    newest = Ceremony.objects.filter(continuation_ref="run:call-1").first()
    assert newest.pk != held.pk and newest.kind == Ceremony.Kind.INPUT_FORM
    assert held.error["code"] == "X_INPUT_REQUIRED"  # this round ended: the next one waits
    approver_client.post(
        f"{newest.get_absolute_url()}answer/",
        {"action": "accept", "seating": "inside", "guests": "2"},
    )
    newest.refresh_from_db()
    assert newest.status == Ceremony.Status.EXECUTED
    first, second, third = sent(calls)
    assert (echoed(first), echoed(second)["round"], echoed(third)["round"]) == (None, 1, 2)
    assert echoed(third)["call"] == echoed(second)["call"]  # one call, through its rounds
    assert held.input_round["requestState"] != newest.input_round["requestState"]
    assert third["inputResponses"]["table"]["content"] == {"seating": "inside", "guests": 2}


def test_each_held_call_sends_back_only_its_own_state(bistro, calls, approver_client):
    agent = bistro(SIGN_IN)
    one = book(agent, ref="run:one", day="friday").ceremony
    two = book(agent, ref="run:two", day="saturday").ceremony
    assert one.input_round["requestState"] != two.input_round["requestState"]

    approver_client.post(f"{two.get_absolute_url()}step/", {"action": "finished"})
    approver_client.post(f"{one.get_absolute_url()}step/", {"action": "finished"})

    # The server binds each state to its call's arguments and refuses another call's.
    for held in (one, two):
        held.refresh_from_db()
        assert held.status == Ceremony.Status.EXECUTED, held.result
    _, _, retry_two, retry_one = sent(calls)
    assert echoed(retry_two)["arguments"] == retry_two["arguments"] == {"day": "saturday"}
    assert echoed(retry_one)["arguments"] == retry_one["arguments"] == {"day": "friday"}


def test_what_no_person_can_give_is_an_error_and_nothing_more_is_sent(bistro, calls):
    outcome = book(bistro(SAMPLING))
    assert outcome.status == "executed"
    assert outcome.envelope["error"]["code"] == "X_INPUT_UNSUPPORTED"
    assert "sampling/createMessage" in outcome.envelope["error"]["message"]
    assert len(sent(calls)) == 1 and not Ceremony.objects.exists()


def test_nobody_but_an_approver_answers_a_form(
    bistro, calls, approver, approver_client, django_user_model
):
    held = book(bistro(WHICH_TABLE)).ceremony
    url = f"{held.get_absolute_url()}answer/"
    answer = {"action": "accept", "seating": "terrace", "guests": "4"}
    outsider = Client()
    outsider.force_login(django_user_model.objects.create_user("viewer", "v@example.org", "pw"))
    assert outsider.post(url, answer).status_code == 403
    assert Client().post(url, answer).status_code == 401
    assert not held.approve(approver)  # answered, never approved into a call
    held.refresh_from_db()
    assert held.status == Ceremony.Status.PENDING and len(sent(calls)) == 1


def test_the_call_carries_its_trace_as_w3c_trace_context(bistro, calls):
    trace = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
    book(bistro(SIGN_IN), trace=trace)
    traceparent = sent(calls)[0]["meta"]["traceparent"]
    version, trace_id, span_id, flags = traceparent.split("-")
    assert (version, trace_id, flags) == ("00", trace.replace("-", ""), "01")
    assert len(span_id) == 16


@pytest.mark.services
def test_a_form_outlives_the_processes_that_held_it(bistro, calls, approver_client, tmp_path):
    """The call is held in this process; its sessions go, as a restarted host's would; the
    answer is queued on the real broker, and a worker that never saw the call sends it again
    with the state kept on the row. (Over HTTP: a stdio server would be restarted with the
    host, and an SDK server's state key is its process's own.)"""
    from mcplet_host.celery import app

    held = book(bistro(WHICH_TABLE, transport="http")).ceremony
    sessions.close_all()
    app.conf.task_always_eager = app.conf.task_eager_propagates = False
    answer = {"action": "accept", "seating": "terrace", "guests": "3"}
    assert approver_client.post(f"{held.get_absolute_url()}answer/", answer).status_code == 302
    assert Ceremony.objects.get(pk=held.pk).status == Ceremony.Status.APPROVED

    with processes.celery_worker(tmp_path / "worker.log", "rounds"):
        processes.wait_until(
            lambda: Ceremony.objects.get(pk=held.pk).is_final, "the worker to send it again"
        )
    held.refresh_from_db()
    assert held.status == Ceremony.Status.EXECUTED, held.result
    first, retry = sent(calls)
    assert echoed(first) is None and echoed(retry)["round"] == 1
    assert retry["inputResponses"]["table"]["content"] == {"seating": "terrace", "guests": 3}


def test_a_strict_actions_step_is_approved_again_and_sent_with_its_state(
    bistro, calls, approver_client, authenticator
):
    """The passkey assertion of the first approval was used once: after the step, the same
    call is held for a fresh approval bound to it, and its run carries the round's state."""
    agent = bistro(SIGN_IN, mcplet_type="action", auth=STRICT)
    first = book(agent).ceremony
    assert first.kind == Ceremony.Kind.TOOL_CALL and first.needs_assertion
    approve(approver_client, first, authenticator)

    step = Ceremony.objects.filter(continuation_ref="run:call-1").first()
    assert step.kind == Ceremony.Kind.STEP_UP and step.enforcement == "strict"
    approver_client.post(f"{step.get_absolute_url()}step/", {"action": "finished"})
    again = Ceremony.objects.filter(continuation_ref="run:call-1").first()
    assert again.kind == Ceremony.Kind.TOOL_CALL and again.status == Ceremony.Status.PENDING
    assert again.input_round == step.input_round
    assert len(sent(calls)) == 1  # nothing is sent on the used assertion

    approve(approver_client, again, authenticator)
    again.refresh_from_db()
    assert again.status == Ceremony.Status.EXECUTED, again.result
    call, retry = sent(calls)
    assert echoed(retry)["round"] == 1 and retry["inputResponses"] == {"login": ACCEPTED}
    assert retry["meta"]["mcplet_auth"] != call["meta"]["mcplet_auth"]  # a fresh assertion


def approve(client, ceremony, key):
    response = post_assertion(client, ceremony, sign(client, ceremony, key))
    assert response.status_code == 200, response.content


def test_a_request_key_no_row_can_keep_is_refused_not_a_crash(bistro, calls):
    hostile = {"\x00login": SIGN_IN["login"]}
    outcome = book(bistro(hostile))
    assert outcome.status == "executed"
    error = outcome.envelope["error"]
    assert error["code"] == "X_INPUT_UNSUPPORTED" and "\x00" not in error["message"]
    assert len(sent(calls)) == 1 and not Ceremony.objects.exists()
    assert AuditEvent.objects.filter(event_type="TOOL_EXECUTED", result="FAILURE").exists()
