"""A person's decision on a held call is taken once: an approval made from a copy read before
another decision committed changes nothing, and nothing runs (the MCP server's call log)."""

import threading

import pytest
from django.core.cache import cache
from django.db import connection, transaction
from django.db.models.signals import post_save
from django.test.utils import CaptureQueriesContext

from held import lifecycle
from held.kinds import result as held_result
from held.models import Asker, Ceremony
from mcplet_host import audit
from mcplet_host.celery import app
from mcplet_host.models import AuditEvent
from tests.passkey.conftest import hold_email

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

ASSERTION = {"type": "passkey_assertion", "challenge": "c2lnbmVk"}


def granted():
    return AuditEvent.objects.filter(event_type="PERMISSION_GRANTED").count()


def test_an_approval_from_a_copy_read_before_a_reject_runs_nothing(registry, approver, calls):
    held = hold_email(registry)
    pages_copy = Ceremony.objects.get(pk=held.pk)  # the approver's page read it pending
    assert Ceremony.objects.get(pk=held.pk).decline(Ceremony.Status.REJECTED, approver)

    assert pages_copy.approve(approver, assertion=ASSERTION) is False
    lifecycle.resume(held.pk)
    held.refresh_from_db()
    assert held.status == Ceremony.Status.REJECTED and held.decided_by == approver
    assert granted() == 0 and cache.get(held.assertion_key) is None
    assert calls() == []


def test_an_approval_racing_a_reject_waits_for_it_then_changes_nothing(registry, approver, calls):
    """Each on its own connection: the approval waits on the row the reject's uncommitted
    decision holds, and once the reject commits it finds the call decided."""
    held = hold_email(registry)
    pages_copy = Ceremony.objects.get(pk=held.pk)
    approved = {}

    def approve():
        try:
            approved["page"] = pages_copy.approve(approver, assertion=ASSERTION)
        finally:
            connection.close()

    thread = threading.Thread(target=approve)
    with transaction.atomic():
        assert Ceremony.objects.get(pk=held.pk).decline(Ceremony.Status.REJECTED, approver)
        thread.start()
        thread.join(1.0)
        assert thread.is_alive()  # waiting for the reject's transaction
    thread.join(30)

    assert approved == {"page": False}
    held.refresh_from_db()
    assert held.status == Ceremony.Status.REJECTED and granted() == 0
    assert AuditEvent.objects.filter(event_type="PERMISSION_DENIED").count() == 1
    assert cache.get(held.assertion_key) is None and calls() == []


def test_an_approval_runs_its_call_once(registry, approver, calls):
    held = hold_email(registry)
    assert held.approve(approver, assertion=ASSERTION) is True
    assert held.status == Ceremony.Status.APPROVED and held.decided_by == approver
    assert Ceremony.objects.get(pk=held.pk).approve(approver) is False  # decided already
    held.refresh_from_db()
    assert held.status == Ceremony.Status.EXECUTED and granted() == 1
    assert [call["name"] for call in calls()] == ["send_email"]


def test_an_approval_is_heard_before_its_call_runs(registry, approver, calls):
    """What listens to a held call's saves (the dashboard's live view, the loopback page)
    hears the approval itself, not only the worker's later run of the call."""
    app.conf.task_always_eager = False  # no worker: the call waits in the queue
    held = hold_email(registry)
    heard = []

    def listen(sender, instance, update_fields, **kwargs):
        heard.append((instance.pk, instance.status, update_fields))

    post_save.connect(listen, sender=Ceremony, weak=False)
    try:
        assert held.approve(approver, assertion=ASSERTION)
    finally:
        post_save.disconnect(listen, sender=Ceremony)
    assert heard == [(held.pk, "approved", {"status", "decided_by", "decided_at"})]
    assert calls() == []


def approved(ceremony, approver):
    """The approval, with the statements it sent."""
    with CaptureQueriesContext(connection) as captured:
        assert ceremony.approve(approver, assertion=ASSERTION) is True
    return [query["sql"].split()[:3] for query in captured.captured_queries]


def test_an_approval_is_one_statement_with_its_audit_event(registry, approver, calls):
    """Its conditional UPDATE and the chained audit event: one round trip on PostgreSQL, where
    a transaction took four; elsewhere they share one."""
    app.conf.task_always_eager = False  # the call waits in the queue
    held = hold_email(registry)
    statements = approved(held, approver)
    if connection.vendor == "postgresql":
        assert statements == [["WITH", "guard", "AS"]]
    row = Ceremony.objects.get(pk=held.pk)
    assert (row.status, row.decided_by, row.decided_at) == ("approved", approver, held.decided_at)
    event = AuditEvent.objects.get(event_type="PERMISSION_GRANTED")
    assert event.actor_id == approver.get_username() and event.details["status"] == "approved"
    assert event.details["arguments_hash"] == held.arguments_hash
    assert audit.verify_chain()[1] is None
    assert cache.get(held.assertion_key) == ASSERTION and calls() == []


def test_a_kind_that_writes_on_its_approval_writes_in_one_transaction(registry, approver):
    """A held result's approval also writes its result: with the decision, or not at all."""
    held = held_result.hold(Asker("planning-agent"), {"plan": "x"}, "Hand it on?")
    statements = approved(held, approver)
    assert ["WITH", "guard", "AS"] not in statements
    row = Ceremony.objects.get(pk=held.pk)
    assert row.status == "executed" and row.result["approved"] is True and granted() == 1
