"""The gateway: every check, every refusal — nothing executed and an audit event written."""

import threading
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db import connection
from django.db.models.signals import post_save
from django.utils import timezone

from held import lifecycle
from held.kinds import rerun as held_rerun
from held.models import Ceremony
from held.tasks import expire_ceremonies
from mcplet_host import gateway
from mcplet_host.authority import HOST, Authority
from mcplet_host.models import AuditEvent
from passkey.assertions import Refused
from pools.models import Mcplet, McpServer, Pool

pytestmark = pytest.mark.django_db

ASSERTION = {
    "type": "passkey_assertion",
    "challenge": "c2VjcmV0LWNoYWxsZW5nZQ",
    "clientDataJSON": "eyJ0eXBlIjoid2ViYXV0aG4uZ2V0In0",
    "authenticatorData": "AAAA",
    "signature": "U0lHTkFUVVJFLUJZVEVT",
    "userHandle": "dXNlcg",
}


def blocked(tool, rule):
    return AuditEvent.objects.get(event_type="TOOL_BLOCKED", target_tool=tool, details__rule=rule)


def assert_refused(outcome, code, says):
    assert outcome.status == "refused"
    assert outcome.envelope["error"]["code"] == code
    assert says in outcome.envelope["error"]["message"]


# --- executing ---------------------------------------------------------------------------------


def test_a_read_runs_and_is_wrapped_and_audited(registry, calls):
    outcome = gateway.call_tool(
        registry["planning"], "query_crm", {"filter": "rain"}, trace="ctx-42"
    )

    assert outcome.status == "executed" and not outcome.is_error
    assert outcome.envelope["result"] == {
        "ok": True,
        "tool": "query_crm",
        "arguments": {"filter": "rain"},
    }
    meta = outcome.envelope["_meta"]
    assert (meta["toolId"], meta["mcpletType"], meta["visibility"]) == (
        "query_crm",
        "read",
        ["model"],
    )
    assert meta["timestamp"].endswith("Z")
    assert [c["arguments"] for c in calls("query_crm")] == [{"filter": "rain"}]
    event = AuditEvent.objects.get(event_type="TOOL_EXECUTED")
    assert (event.actor_id, event.target_tool, event.target_server) == (
        "planning-agent",
        "query_crm",
        "reference",
    )
    assert (event.result, event.trace_id, event.details["surface"]) == (
        "SUCCESS",
        "ctx-42",
        "model",
    )


def test_a_result_is_checked_against_its_declared_schema(registry):
    good = gateway.call_tool(registry["dispatch"], "read_site_stats", {})
    assert good.envelope["result"] == {"visits": 1200}
    bad = gateway.call_tool(registry["planning"], "broken_stats", {})
    assert bad.status == "executed" and bad.envelope["error"]["code"] == "X_INVALID_RESULT"
    assert "visits: 'many' is not of type 'integer'" in bad.envelope["error"]["message"]
    assert (
        AuditEvent.objects.get(event_type="TOOL_EXECUTED", target_tool="broken_stats").result
        == "FAILURE"
    )


def test_tool_list_is_accepted_model_visible_and_granted(registry):
    names = lambda agent, authority=HOST: [t.name for t in gateway.tools_for(agent, authority)]  # noqa: E731
    common = ["approve_plan", "broken_stats", "query_crm"]  # pool-less and model-visible
    assert names(registry["planning"]) == common
    assert names(registry["info"]) == sorted([*common, "fetch_web_content"])
    assert names(registry["dispatch"]) == sorted([*common, "read_site_stats"])
    assert names(registry["info"], Authority.of_partner("partner-bot")) == common


# --- refusals: nothing runs, an audit event says why ----------------------------------------------


def test_unknown_tool(registry, calls):
    outcome = gateway.call_tool(registry["info"], "drop_database", {})
    assert_refused(outcome, "NOT_FOUND", "No MCPlet named 'drop_database' is available.")
    assert "mcpletType" not in outcome.envelope["_meta"]
    assert calls() == [] and blocked("drop_database", "routable").actor_id == "info-gathering-agent"


def test_evicted_and_rejected_tools_are_not_routable(registry, calls):
    Mcplet.objects.filter(name="query_crm").update(
        status=Mcplet.Status.EVICTED, rejection_reason="no longer listed"
    )
    outcome = gateway.call_tool(registry["info"], "query_crm", {"filter": "x"})
    assert_refused(outcome, "NOT_FOUND", "(it is evicted: no longer listed)")
    assert calls() == [] and blocked("query_crm", "routable")


def test_an_app_only_tool_on_the_model_surface(registry, calls):
    outcome = gateway.call_tool(registry["planning"], "app_only_lookup", {}, surface="model")
    assert_refused(outcome, "X_ACCESS_DENIED", "cannot be called from the model surface")
    assert calls() == [] and blocked("app_only_lookup", "surface")
    assert (
        gateway.call_tool(registry["planning"], "app_only_lookup", {}, surface="app").status
        == "executed"
    )


def test_a_model_only_tool_on_the_app_surface(registry, calls):
    outcome = gateway.call_tool(registry["planning"], "query_crm", {"filter": "x"}, surface="app")
    assert_refused(outcome, "X_ACCESS_DENIED", "cannot be called from the app surface")
    assert calls() == []


def test_a_pool_that_is_not_granted(registry, calls):
    outcome = gateway.call_tool(
        registry["planning"], "fetch_web_content", {"url": "https://w.example"}
    )
    assert_refused(
        outcome,
        "X_ACCESS_DENIED",
        "belongs to the pool info-pool, which is not granted to planning-agent",
    )
    assert calls() == [] and blocked("fetch_web_content", "pool")


def test_a_partner_task_needs_the_pool_in_both_grants(registry, calls):
    partner, info = registry["partner"], registry["info"]
    args = {"url": "https://weather.example/tomorrow"}
    authority = Authority.of_partner("partner-bot")
    refused = gateway.call_tool(info, "fetch_web_content", args, authority=authority)
    assert_refused(refused, "X_ACCESS_DENIED", "not granted to partner-bot")
    assert blocked("fetch_web_content", "pool").details["partner"] == "partner-bot"

    partner.accessible_pools.add(registry["info-pool"], registry["media-pool"])
    assert gateway.call_tool(info, "fetch_web_content", args, authority=authority).status == (
        "executed"
    )
    refused = gateway.call_tool(
        registry["planning"], "fetch_web_content", args, authority=authority
    )
    assert_refused(refused, "X_ACCESS_DENIED", "not granted to planning-agent")
    assert len(calls()) == 1


def test_a_disabled_agent(registry, calls):
    registry["planning"].enabled = False
    outcome = gateway.call_tool(registry["planning"], "query_crm", {"filter": "x"})
    assert_refused(outcome, "X_ACCESS_DENIED", "planning-agent is disabled")
    assert calls() == []


def test_the_rate_limit_refuses_with_a_retry_hint(registry, calls):
    pool = registry["media-pool"]
    pool.rate_limit_per_minute = 2
    pool.save()
    results = [gateway.call_tool(registry["dispatch"], "read_site_stats", {}) for _ in range(3)]
    assert [r.status for r in results] == ["executed", "executed", "refused"]
    error = results[2].envelope["error"]
    assert (
        error["code"] == "RATE_LIMITED"
        and error["retryable"] is True
        and error["retry_after_ms"] > 0
    )
    assert len(calls()) == 2 and blocked("read_site_stats", "rate_limit")


def test_the_domain_allowlist(registry, calls):
    pool = registry["info-pool"]
    pool.domain_allowlist = ["*.weather.example", "crm.example"]
    pool.save()
    info = registry["info"]
    assert (
        gateway.call_tool(
            info, "fetch_web_content", {"url": "https://api.weather.example/x"}
        ).status
        == "executed"
    )
    outcome = gateway.call_tool(info, "fetch_web_content", {"url": "https://evil.example/steal"})
    assert_refused(
        outcome,
        "X_DOMAIN_NOT_ALLOWED",
        "The pool info-pool's domain allowlist (*.weather.example, crm.example) refuses "
        "'https://evil.example/steal' points to evil.example, which is not on the allowlist.",
    )
    assert outcome.envelope["error"]["retryable"] is False
    # urlsplit reads crm.example in it; the HTTP clients that fetch it connect to evil.example.
    backslash = {"url": "http://evil.example\\@crm.example/"}
    outcome = gateway.call_tool(info, "fetch_web_content", backslash)
    assert_refused(outcome, "X_DOMAIN_NOT_ALLOWED", "is ambiguous: it holds a backslash")
    # A wildcard matches whole labels: *.weather.example is not evilweather.example.
    outcome = gateway.call_tool(info, "fetch_web_content", {"url": "https://evilweather.example/"})
    assert_refused(outcome, "X_DOMAIN_NOT_ALLOWED", "points to evilweather.example")
    assert len(calls()) == 1
    assert AuditEvent.objects.filter(details__rule="domain_allowlist").count() == 3


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({}, "(the arguments): 'filter' is a required property"),
        ({"filter": 3}, "filter: 3 is not of type 'string'"),
        (["rain"], "Arguments must be a JSON object."),
    ],
)
def test_arguments_are_validated_naming_the_field(registry, calls, arguments, says):
    outcome = gateway.call_tool(registry["planning"], "query_crm", arguments)
    assert_refused(outcome, "VALIDATION_ERROR", says)
    assert calls() == [] and blocked("query_crm", "arguments")


def test_a_server_that_is_down(registry):
    McpServer.objects.filter(pk=registry["server"].pk).update(command="/nonexistent/server")
    outcome = gateway.call_tool(registry["planning"], "query_crm", {"filter": "rain"})
    assert outcome.status == "executed"  # it was tried: the server did not answer
    error = outcome.envelope["error"]
    assert error["code"] == "SERVICE_UNAVAILABLE" and error["retryable"] is True
    assert "reference: " in error["message"]
    assert (
        AuditEvent.objects.get(event_type="TOOL_EXECUTED").details["code"] == "SERVICE_UNAVAILABLE"
    )


def test_a_disabled_server(registry, calls):
    McpServer.objects.filter(pk=registry["server"].pk).update(enabled=False)
    outcome = gateway.call_tool(registry["planning"], "query_crm", {"filter": "rain"})
    assert outcome.envelope["error"]["code"] == "SERVICE_UNAVAILABLE" and calls() == []


# --- approvals ---------------------------------------------------------------------------------


def hold_email(registry, **kwargs):
    args = {"to": ["sato@example.jp"], "body": "Free dessert tomorrow!"}
    outcome = gateway.call_tool(registry["dispatch"], "send_email", args, "app", "ctx-7", **kwargs)
    assert outcome.status == "pending" and outcome.envelope is None
    return outcome.ceremony


def test_an_action_is_held_not_run(registry, calls):
    ceremony = hold_email(registry)
    assert ceremony.status == Ceremony.Status.PENDING and ceremony.enforcement == "strict"
    assert ceremony.arguments == {"to": ["sato@example.jp"], "body": "Free dessert tomorrow!"}
    assert (ceremony.prompt_message, ceremony.trace_id, ceremony.agent_id) == (
        "Approve the e-mail",
        "ctx-7",
        "dispatch-agent",
    )
    assert ceremony.expires_at > timezone.now() and len(ceremony.arguments_hash) == 64
    assert calls() == []
    event = AuditEvent.objects.get(event_type="mcplet.approval.requested")
    assert event.result == "PENDING" and event.details["arguments"]["to"] == ["sato@example.jp"]


def test_approved_strict_call_runs_once_with_the_assertion_in_meta_only(
    registry, calls, admin_user
):
    ceremony = hold_email(registry)
    assert ceremony.approve(admin_user, assertion=ASSERTION)
    lifecycle.resume(ceremony.pk)
    lifecycle.resume(ceremony.pk)  # a redelivered task

    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.EXECUTED and "result" in ceremony.result
    (call,) = calls("send_email")
    assert call["meta"]["mcplet_auth"] == ASSERTION
    assert call["meta"]["idempotencyKey"] == ceremony.token
    assert call["arguments"] == {"to": ["sato@example.jp"], "body": "Free dessert tomorrow!"}
    assert cache.get(ceremony.assertion_key) is None
    kinds = list(AuditEvent.objects.order_by("seq").values_list("event_type", flat=True))
    assert kinds[-3:] == ["mcplet.approval.requested", "PERMISSION_GRANTED", "TOOL_EXECUTED"]
    assert AuditEvent.objects.get(event_type="PERMISSION_GRANTED").actor_id == admin_user.username
    assert_nowhere_in_database(ASSERTION["signature"])


def test_a_calls_end_is_heard_by_the_ceremonys_receivers(registry, calls, admin_user):
    """The dashboard's live approvals and the loopback page learn of the end from post_save: an
    end written in place left the approvals page at "Executing" after the e-mails had left."""
    ceremony = hold_email(registry)
    ceremony.approve(admin_user, assertion=ASSERTION)
    heard = []

    def receiver(sender, instance, **kwargs):
        heard.append(instance.status)

    post_save.connect(receiver, sender=Ceremony)
    try:
        lifecycle.resume(ceremony.pk)
    finally:
        post_save.disconnect(receiver, sender=Ceremony)
    assert heard[-1] == Ceremony.Status.EXECUTED and len(calls("send_email")) == 1


def assert_nowhere_in_database(secret):
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')  # noqa: S608 (table names from introspection)
            for row in cursor.fetchall():
                assert secret not in repr(row), table


def test_approved_host_only_call_runs_without_an_assertion(registry, calls, admin_user):
    outcome = gateway.call_tool(registry["planning"], "approve_plan", {}, "model")
    ceremony = outcome.ceremony
    assert ceremony.enforcement == "host-only"
    ceremony.approve(admin_user)
    lifecycle.resume(ceremony.pk)
    (call,) = calls("approve_plan")
    assert "mcplet_auth" not in call["meta"]


def test_a_strict_approval_whose_assertion_is_gone(registry, calls, admin_user):
    ceremony = hold_email(registry)
    ceremony.approve(admin_user, assertion=ASSERTION)
    cache.delete(ceremony.assertion_key)
    lifecycle.resume(ceremony.pk)
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.FAILED
    assert ceremony.result["error"]["code"] == "AUTH_REQUIRED" and calls() == []
    assert blocked("send_email", "assertion")


def test_a_rejected_call_never_runs(registry, calls, admin_user):
    ceremony = hold_email(registry)
    assert ceremony.decline(Ceremony.Status.REJECTED, admin_user)
    assert not ceremony.approve(admin_user, assertion=ASSERTION)  # decided once
    lifecycle.resume(ceremony.pk)
    ceremony.refresh_from_db()
    assert ceremony.result["error"]["code"] == "X_APPROVAL_REJECTED" and calls() == []
    assert AuditEvent.objects.get(event_type="PERMISSION_DENIED").details["status"] == "rejected"


def test_an_expired_call_never_runs(registry, calls, admin_user):
    ceremony = hold_email(registry)
    Ceremony.objects.filter(pk=ceremony.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert not Ceremony.objects.get(pk=ceremony.pk).approve(admin_user, assertion=ASSERTION)
    expire_ceremonies()
    lifecycle.resume(ceremony.pk)
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.EXPIRED and calls() == []
    assert ceremony.result["error"]["code"] == "X_APPROVAL_EXPIRED"
    assert AuditEvent.objects.get(event_type="PERMISSION_DENIED").actor_type == "system"


def test_grants_are_checked_again_when_the_call_resumes(registry, calls, admin_user):
    ceremony = hold_email(registry)
    registry["dispatch"].accessible_pools.clear()
    ceremony.approve(admin_user, assertion=ASSERTION)
    lifecycle.resume(ceremony.pk)
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.FAILED and calls() == []
    assert "not granted to dispatch-agent" in ceremony.result["error"]["message"]


def test_the_continuation_is_told(
    registry, admin_user, monkeypatch, django_capture_on_commit_callbacks
):
    queued = []
    for where in ("held.models.enqueue", "held.kinds.base.enqueue"):
        monkeypatch.setattr(where, lambda name, args: queued.append((name, args)))
    ceremony = hold_email(registry, continuation="agents.resume_run", continuation_ref="run-9")
    with django_capture_on_commit_callbacks(execute=True):
        ceremony.decline(Ceremony.Status.REJECTED, admin_user)
        lifecycle.resume(ceremony.pk)
    assert queued == [
        ("mcplet_host.resume_call", [ceremony.pk]),
        ("agents.resume_run", [ceremony.pk, "run-9"]),
    ]


@pytest.mark.django_db(transaction=True)
def test_concurrent_resumes_execute_once(registry, calls, admin_user):
    ceremony = hold_email(registry)
    Ceremony.objects.filter(pk=ceremony.pk).update(status=Ceremony.Status.APPROVED)
    cache.set(ceremony.assertion_key, ASSERTION, 60)

    def resume():
        try:
            lifecycle.resume(ceremony.pk)
        finally:
            connection.close()

    threads = [threading.Thread(target=resume) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls("send_email")) == 1
    assert Ceremony.objects.get(pk=ceremony.pk).status == Ceremony.Status.EXECUTED


def test_admin_lists_held_calls_and_rejects_them(registry, calls, staff_client):
    ceremony = hold_email(registry)
    page = staff_client.get(f"/admin/held/ceremony/{ceremony.pk}/change/").content.decode()
    assert "sato@example.jp" in page and "Free dessert tomorrow!" in page
    staff_client.post(
        "/admin/held/ceremony/", {"action": "reject", "_selected_action": [ceremony.pk]}
    )
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.REJECTED and calls() == []


# --- an approved call that got no answer ---------------------------------------------------------


def test_an_approved_call_that_got_no_answer_is_outcome_unknown_and_never_resent(
    registry, calls, admin_user, slow_tool, staff_client
):
    ceremony = gateway.call_tool(registry["planning"], slow_tool, {}, "app").ceremony
    assert ceremony.approve(admin_user)
    lifecycle.resume(ceremony.pk)

    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.OUTCOME_UNKNOWN, ceremony.result
    assert ceremony.get_status_display() == "outcome unknown" and ceremony.is_final
    error = ceremony.result["error"]
    assert error["code"] == "X_OUTCOME_UNKNOWN" and error["retryable"] is False
    assert "may have run" in error["message"] and "will not send it again" in error["message"]
    (call,) = calls(slow_tool)  # it reached the server: the server's own log says so
    assert call["meta"]["idempotencyKey"] == ceremony.token  # what a person's re-run reuses
    lifecycle.resume(ceremony.pk)  # a redelivered resume: the host never sends it again
    assert len(calls(slow_tool)) == 1
    executed = AuditEvent.objects.get(event_type="TOOL_EXECUTED", target_tool=slow_tool)
    assert (executed.result, executed.details["code"]) == ("FAILURE", "X_OUTCOME_UNKNOWN")
    approvals = staff_client.get("/dashboard/approvals/").content.decode()
    row = approvals.split(f'id="approval-{ceremony.pk}"')[1].split("</tr>")[0]
    assert "outcome unknown" in row and "X_OUTCOME_UNKNOWN" in row and "will not re-send" in row


def test_a_persons_rerun_sends_the_first_attempts_idempotency_key_once_approved(
    registry, calls, admin_user, slow_tool, settings
):
    planning = registry["planning"]
    first = gateway.call_tool(planning, slow_tool, {"table": 4}, "app", "ctx-r").ceremony
    assert first.approve(admin_user)
    lifecycle.resume(first.pk)
    first.refresh_from_db()
    assert first.status == Ceremony.Status.OUTCOME_UNKNOWN

    # A person's decision to try again: held, not sent.
    rerun = held_rerun.run_again(first, admin_user)
    assert (rerun.status, rerun.rerun_of, rerun.trace_id) == ("pending", first, "ctx-r")
    assert (rerun.tool_name, rerun.arguments) == (slow_tool, {"table": 4})
    assert not rerun.continuation  # the run it answered has moved on
    assert rerun.token != first.token and rerun.idempotency_key == first.token
    assert len(calls(slow_tool)) == 1
    settings.MCPLET_TOOL_TIMEOUT = 10  # this time the server's answer arrives
    assert rerun.approve(admin_user)
    lifecycle.resume(rerun.pk)
    lifecycle.resume(rerun.pk)  # a redelivered resume acts once

    rerun.refresh_from_db()
    assert rerun.status == Ceremony.Status.EXECUTED, rerun.result
    sent = calls(slow_tool)  # the server's own log: the same call, the same idempotency key
    assert [c["meta"]["idempotencyKey"] for c in sent] == [first.token, first.token]
    assert [c["arguments"] for c in sent] == [{"table": 4}, {"table": 4}]
    requested = AuditEvent.objects.get(event_type="mcplet.approval.rerun_requested")
    assert (requested.actor_id, requested.trace_id) == (admin_user.username, "ctx-r")
    assert requested.details["rerun_of"] == first.token[:8]
    assert requested.details["ceremony"] == rerun.token[:8]
    executed = AuditEvent.objects.filter(event_type="TOOL_EXECUTED", target_tool=slow_tool)
    assert [e.details.get("rerun_of") for e in executed.order_by("timestamp")] == [
        None,
        first.token[:8],
    ]
    # Once a re-run ran, neither attempt may be run again.
    with pytest.raises(Refused, match="already ran"):
        held_rerun.run_again(first, admin_user)
    assert len(calls(slow_tool)) == 2


# --- a pool that does not exist (issue 14, reproduction 3) -------------------------------------


def test_deleting_a_pool_makes_its_tools_unroutable_at_once(registry, calls, admin_user):
    held = hold_email(registry)  # send_email declares media-pool
    held.approve(admin_user, assertion=ASSERTION)
    Pool.objects.get(name="media-pool").delete()

    names = lambda agent: {t.name for t in gateway.tools_for(agent)}  # noqa: E731
    for agent in (registry["planning"], registry["dispatch"], registry["info"]):
        assert "read_site_stats" not in names(agent)
        outcome = gateway.call_tool(agent, "read_site_stats", {})
        assert_refused(outcome, "NOT_FOUND", "declares the pool 'media-pool'")
    lifecycle.resume(held.pk)
    held.refresh_from_db()
    assert held.status == Ceremony.Status.FAILED and held.result["error"]["code"] == "NOT_FOUND"
    assert calls() == []
    refusals = AuditEvent.objects.filter(event_type="TOOL_BLOCKED", details__rule="routable")
    assert refusals.count() == 4

    # The pool created again (and granted again): its tools route without a new discovery.
    registry["dispatch"].accessible_pools.add(Pool.objects.create(name="media-pool"))
    assert "read_site_stats" in names(registry["dispatch"])
    assert "read_site_stats" not in names(registry["planning"])
    assert gateway.call_tool(registry["dispatch"], "read_site_stats", {}).status == "executed"
    assert len(calls("read_site_stats")) == 1


def test_a_renamed_pool_no_longer_routes_the_tools_declaring_its_old_name(registry, calls):
    Pool.objects.filter(name="media-pool").update(name="media-pool-2")
    assert "read_site_stats" not in {t.name for t in gateway.tools_for(registry["dispatch"])}
    outcome = gateway.call_tool(registry["dispatch"], "read_site_stats", {})
    assert_refused(outcome, "NOT_FOUND", "declares the pool 'media-pool'")
    assert calls() == []


# --- hostile text (issue 14, reproduction 5) ------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments", "surface", "says"),
    [
        ("query_crm\x00", {"filter": "x"}, "model", "The tool name 'query_crm\\x00' is not"),
        ("query_crm\ud800", {"filter": "x"}, "model", "The tool name 'query_crm\\ud800' is not"),
        ("query_crm", {"filter": "x"}, "mo\x00del", "The surface 'mo\\x00del' is not"),
        ("query_crm", {"filter": "x\x00"}, "model", "arguments at filter: it holds a NUL"),
        ("query_crm", {"filter": "x", "k\x00": 1}, "model", "arguments at (the arguments): a key"),
        ("query_crm", {"filter": "\udc00"}, "model", "arguments at filter: it holds a lone"),
        ("query_crm", {"filter": "x", "n": float("inf")}, "model", "at n: it is not a finite"),
        ("fetch_web_content", {"url": "https://w.example/\x00"}, "model", "at url: it holds a NUL"),
        ("send_email", {"to": ["a@b.example\x00"], "body": "x"}, "app", "at to[0]: it holds a"),
    ],
)
def test_text_the_database_cannot_hold_is_refused_and_audited(
    registry, calls, tool, arguments, surface, says
):
    outcome = gateway.call_tool(registry["info"], tool, arguments, surface)
    assert_refused(outcome, "VALIDATION_ERROR", says)
    assert "\x00" not in str(outcome.envelope)
    event = AuditEvent.objects.get(event_type="TOOL_BLOCKED", details__rule="input")
    assert "\x00" not in event.target_tool + event.details["surface"]
    assert calls() == [] and not Ceremony.objects.exists()
