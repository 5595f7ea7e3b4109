""" "Run again" for an approved call whose outcome is unknown: only by an approver, only for such
a call, one re-run at a time, only from the page's own form — each refusal runs nothing (the MCP
server's call log) and is audited; a partner's call run again still acts for that partner. The
happy path in a browser: tests/e2e/test_passkey_browser."""

import uuid

import pytest
from django.test import Client

from held import lifecycle
from held.models import Ceremony
from mcplet_host import gateway
from mcplet_host.authority import Authority
from mcplet_host.models import AuditEvent
from mcplets.examples.programmable import stdio_params, write_spec
from passkey.models import REFUSED_EVENT
from pools.discovery import discover
from pools.models import McpServer, Pool
from tests.conftest import entry
from tests.passkey.conftest import post_assertion, sign, url

pytestmark = pytest.mark.django_db

TRACE = str(uuid.uuid4())


@pytest.fixture
def unknown(registry, slow_tool, approver):
    """An approved booking that was sent and got no answer in time."""
    first = gateway.call_tool(registry["planning"], slow_tool, {"table": 4}, "app", TRACE)
    first = first.ceremony
    assert first.approve(approver)
    lifecycle.resume(first.pk)
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
    # What it runs, as the first attempt's page said: the tool, on its server.
    tool = (
        f"<code><bdi>{rerun.tool_name}</bdi></code> on the server "
        f"<code><bdi>{rerun.server_name}</bdi></code>"
    )
    assert f'<dd id="tool">{tool}</dd>' in rerun_page


def test_run_again_without_the_forms_csrf_token_is_refused(unknown, calls, approver):
    client = Client(enforce_csrf_checks=True)
    client.force_login(approver)

    assert client.post(url(unknown, "run-again")).status_code == 403

    assert Ceremony.objects.count() == 1 and len(calls("book_table")) == 1
    event = AuditEvent.objects.get(event_type="http.csrf_refused")
    assert (event.actor_id, event.details["path"]) == ("manager", url(unknown, "run-again"))


# --- a partner's call, run again (issue 23) ------------------------------------------------------

# A partner's task that went through the information agent: the re-run acts for the same.
PARTNER = Authority.of_partner("partner-bot").then("info-gathering-agent")


@pytest.fixture
def partner_unknown(tmp_path, calls, settings, registry, approver):
    """A booking on behalf of partner-bot, in a pool both it and planning-agent hold, approved,
    sent, and unanswered in time (the server answers after 2 s, the host waits 1 s)."""
    pool = Pool.objects.create(name="bistro-pool")
    booking = {**entry("book_table", "action", ("app",), pool="bistro-pool"), "sleep": 2}
    command, args = stdio_params(
        write_spec(tmp_path / "bistro.json", [booking, entry("ping")]), calls_log=calls.path
    )
    discover(McpServer.objects.create(name="bistro", transport="stdio", command=command, args=args))
    registry["planning"].accessible_pools.add(pool)
    registry["partner"].accessible_pools.add(pool)
    assert gateway.call_tool(registry["planning"], "ping", {}).status == "executed"  # session up
    settings.MCPLET_TOOL_TIMEOUT = 1
    outcome = gateway.call_tool(
        registry["planning"], "book_table", {"table": 4}, "app", TRACE, authority=PARTNER
    )
    first = outcome.ceremony
    assert first.authority == PARTNER and first.approve(approver)
    lifecycle.resume(first.pk)
    first.refresh_from_db()
    assert first.status == Ceremony.Status.OUTCOME_UNKNOWN, first.result
    assert len(calls("book_table")) == 1
    settings.MCPLET_TOOL_TIMEOUT = 10  # from now on the server's answer arrives
    return first


def run_again_and_approve(client, first, authenticator):
    """A person presses Run again on the first attempt's page, then approves the re-run with a
    passkey on its own page; the resume a worker would run, run here (twice: redelivered).
    Returns the re-run and its page as the approver read it before approving."""
    response = client.post(url(first, "run-again"))
    rerun = Ceremony.objects.get(rerun_of=first)
    assert response.status_code == 302 and response["Location"] == rerun.get_absolute_url()
    page = client.get(url(rerun)).content.decode()
    assert post_assertion(client, rerun, sign(client, rerun, authenticator)).status_code == 200
    lifecycle.resume(rerun.pk)
    lifecycle.resume(rerun.pk)
    rerun.refresh_from_db()
    return rerun, page


def assert_names_the_partner(page):
    assert 'id="partner"><bdi>partner-bot</bdi></strong>' in page
    assert 'id="chain"><bdi>info-gathering-agent</bdi></span>' in page


def rerun_events(rerun):
    """Every audit event about the re-run: they all name it by its token."""
    events = AuditEvent.objects.filter(details__ceremony=rerun.token[:8]).order_by("seq")
    for event in events:  # each one says for whom and through whom
        assert event.details.get("partner") == "partner-bot", (event.event_type, event.details)
        assert event.details.get("via") == ["info-gathering-agent"], event.event_type
    return events


def test_a_partners_call_run_again_still_acts_for_the_partner(
    partner_unknown, calls, approver_client, authenticator
):
    first = partner_unknown

    rerun, page = run_again_and_approve(approver_client, first, authenticator)

    assert rerun.status == Ceremony.Status.EXECUTED, rerun.result
    sent = calls("book_table")  # the server's own log: the same call, once more
    assert [c["meta"]["idempotencyKey"] for c in sent] == [first.token, first.token]
    assert rerun.authority == PARTNER and rerun.partner_id == "partner-bot"
    assert rerun.provenance == first.provenance
    assert_names_the_partner(page)  # what the approver read before approving
    events = rerun_events(rerun)
    kinds = [e.event_type for e in events]
    assert kinds == ["mcplet.approval.rerun_requested", "PERMISSION_GRANTED", "TOOL_EXECUTED"]
    executed = events.get(event_type="TOOL_EXECUTED")
    assert (executed.actor_id, executed.result, executed.details["pool"]) == (
        "planning-agent",
        "SUCCESS",
        "bistro-pool",
    )
    assert executed.details["rerun_of"] == first.token[:8]


def test_a_partners_call_run_again_after_the_partner_lost_the_pool_runs_nothing(
    partner_unknown, calls, registry, approver_client, authenticator
):
    first = partner_unknown
    registry["partner"].accessible_pools.remove(Pool.objects.get(name="bistro-pool"))

    rerun, page = run_again_and_approve(approver_client, first, authenticator)

    # Nothing ran: the server received the first attempt only.
    assert [c["meta"]["idempotencyKey"] for c in calls("book_table")] == [first.token]
    assert rerun.status == Ceremony.Status.FAILED, rerun.result
    error = rerun.result["error"]
    assert error["code"] == "X_ACCESS_DENIED" and "not granted to partner-bot" in error["message"]
    assert rerun.authority == PARTNER
    assert_names_the_partner(page)
    kinds = [e.event_type for e in rerun_events(rerun)]
    assert kinds == ["mcplet.approval.rerun_requested", "PERMISSION_GRANTED", "TOOL_BLOCKED"]
    blocked = AuditEvent.objects.get(event_type="TOOL_BLOCKED", details__ceremony=rerun.token[:8])
    assert (blocked.actor_id, blocked.details["rule"]) == ("planning-agent", "pool")
    assert not AuditEvent.objects.filter(
        event_type="TOOL_EXECUTED", details__ceremony=rerun.token[:8]
    ).exists()


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
