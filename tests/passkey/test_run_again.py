""" "Run again" for an approved call whose outcome is unknown: only by an approver, only for such
a call, one re-run at a time, only from the page's own form — each refusal runs nothing (the MCP
server's call log) and is audited. The happy path in a browser: tests/e2e/test_passkey_browser."""

import uuid

import pytest
from django.test import Client

from mcplet_host import gateway
from mcplet_host.models import AuditEvent
from passkey.models import REFUSED_EVENT, Ceremony
from tests.passkey.conftest import url

pytestmark = pytest.mark.django_db

TRACE = str(uuid.uuid4())


@pytest.fixture
def unknown(registry, slow_tool, approver):
    """An approved booking that was sent and got no answer in time."""
    first = gateway.call_tool(registry["planning"], slow_tool, {"table": 4}, "app", TRACE)
    first = first.ceremony
    assert first.approve(approver)
    gateway.resume(first.pk)
    first.refresh_from_db()
    assert first.status == Ceremony.Status.OUTCOME_UNKNOWN
    return first


def refusal(reason):
    return AuditEvent.objects.get(event_type=REFUSED_EVENT, details__reason=reason)


def test_only_a_call_whose_outcome_is_unknown_can_be_run_again(approver_client, held, calls):
    page = approver_client.get(url(held)).content.decode()
    assert "run-again" not in page

    response = approver_client.post(url(held, "run-again"))

    assert response.status_code == 409
    assert "Only a call whose outcome is unknown can be run again" in response.content.decode()
    assert Ceremony.objects.count() == 1 and calls() == []
    event = refusal("not_outcome_unknown")
    assert (event.actor_id, event.details["stage"]) == ("manager", "run-again")
    assert event.details["ceremony"] == held.token[:8]


def test_someone_who_may_not_approve_cannot_run_it_again(
    unknown, calls, django_user_model, staff_client
):
    operator = Client()  # staff, without the approve permission
    operator.force_login(django_user_model.objects.create_user("ops", is_staff=True))
    assert operator.post(url(unknown, "run-again")).status_code == 403
    assert Client().post(url(unknown, "run-again")).status_code == 401  # signed out
    assert Ceremony.objects.count() == 1 and len(calls("book_table")) == 1
    refused = AuditEvent.objects.filter(event_type=REFUSED_EVENT, details__reason="not_an_approver")
    assert sorted(e.details["stage"] for e in refused) == ["run_again", "run_again"]
    # The operator is led to the approval page, where an approver decides.
    approvals = staff_client.get("/dashboard/approvals/").content.decode()
    row = approvals.split(f'id="approval-{unknown.pk}"')[1].split("</tr>")[0]
    assert f'href="{unknown.get_absolute_url()}#run-again"' in row
    trace = staff_client.get(f"/dashboard/runs/{TRACE}/").content.decode()
    section = trace.split('id="unknown-outcomes"')[1].split("</section>")[0]
    assert "book_table" in section and f'href="{unknown.get_absolute_url()}#run-again"' in section


def test_a_second_run_again_while_one_waits_is_refused(unknown, calls, approver_client):
    page = approver_client.get(url(unknown)).content.decode()
    assert "The first attempt may have run" in page and 'id="run-again-button"' in page

    response = approver_client.post(url(unknown, "run-again"))
    rerun = Ceremony.objects.get(rerun_of=unknown)
    assert response.status_code == 302 and response["Location"] == rerun.get_absolute_url()
    assert rerun.status == Ceremony.Status.PENDING and rerun.idempotency_key == unknown.token

    again = approver_client.post(url(unknown, "run-again"))
    assert again.status_code == 409
    assert "already waiting for approval" in again.content.decode()
    assert 'id="run-again-button"' not in again.content.decode()
    assert Ceremony.objects.count() == 2 and len(calls("book_table")) == 1
    assert refusal("rerun_open").details["stage"] == "run-again"
    requested = AuditEvent.objects.get(event_type="mcplet.approval.rerun_requested")
    assert requested.details["rerun_of"] == unknown.token[:8]
    # Each page names the other: the first attempt lists its re-run, the re-run its origin.
    assert rerun.get_absolute_url() in approver_client.get(url(unknown)).content.decode()
    rerun_page = approver_client.get(url(rerun)).content.decode()
    assert 'id="rerun-of"' in rerun_page and unknown.get_absolute_url() in rerun_page


def test_run_again_without_the_forms_csrf_token_is_refused(unknown, calls, approver):
    client = Client(enforce_csrf_checks=True)
    client.force_login(approver)

    assert client.post(url(unknown, "run-again")).status_code == 403

    assert Ceremony.objects.count() == 1 and len(calls("book_table")) == 1
    event = AuditEvent.objects.get(event_type="http.csrf_refused")
    assert (event.actor_id, event.details["path"]) == ("manager", url(unknown, "run-again"))


def test_in_localhost_mode_run_again_leads_to_the_reruns_own_page(
    unknown, calls, approver_client, settings
):
    """Not a redirect to the re-run's loopback port: after a form, the CSP would stop it."""
    from passkey import loopback

    settings.PASSKEY_MODE = "localhost"
    response = approver_client.post(url(unknown, "run-again"))
    rerun = Ceremony.objects.get(rerun_of=unknown)
    live = loopback.live_url(rerun.token)
    assert live.startswith("http://localhost:") and live.endswith(url(rerun))
    assert response.status_code == 200 and f'id="go" class="button approve" href="{live}"' in (
        response.content.decode()
    )
    assert len(calls("book_table")) == 1
