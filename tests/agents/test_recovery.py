"""Beat's recovery: work whose Celery task was lost (a worker SIGKILLed, the broker's data
lost) is taken up again; a call whose worker died mid-call is settled as outcome-unknown and
never sent again. Each loss is made for real: the task goes to Redis and Redis loses it."""

from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from a2a import bus
from a2a.models import A2AMessage
from agents.models import AgentRun
from agents.tasks import recover
from held import lifecycle
from held.kinds import tool_call
from held.models import Ceremony
from held.tasks import recover_calls
from mcplet_host.celery import app
from tests.mcplet_host.test_gateway import ASSERTION

pytestmark = [
    pytest.mark.services,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("eager", "director"),
]

EMAIL = {"to": ["sato@example.jp"], "body": "Free dessert tomorrow"}
LONG_AGO = timedelta(hours=1)


def lose_what_is_queued(everything=False):
    """The broker loses its queued tasks, or Redis all its data (the test's own database):
    the cache too, and with it a strict call's passkey assertion."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    if everything:
        client.flushdb()
    else:
        client.delete(app.conf.task_default_queue)


def queued_not_run():
    app.conf.task_always_eager = False  # the tasks go to Redis, and no worker consumes them


def dispatching(registry, script):
    dispatch = registry["dispatch"]
    dispatch.model = script(
        {"dispatch-agent": [{"json": {"actions": [{"tool": "send_email", "arguments": EMAIL}]}}]}
    )
    dispatch.save()
    request = bus.send_task("director", "dispatch-agent", {"store": "shinjuku"})
    return request, AgentRun.objects.get(request=request)


def responses(request):
    return list(A2AMessage.objects.filter(reply_to=request.message_id))


def test_a_lost_delivery_is_delivered_again(registry, script):
    queued_not_run()
    request = bus.send_task("director", "dispatch-agent", {"store": "shinjuku"})
    lose_what_is_queued()
    app.conf.task_always_eager = True
    registry["dispatch"].model = script({"dispatch-agent": [{"json": {"sent": 0}}]})
    registry["dispatch"].save()

    recover()  # too recent: maybe still on its way
    assert not AgentRun.objects.exists()
    A2AMessage.objects.filter(pk=request.pk).update(created_at=timezone.now() - LONG_AGO)
    recover()

    assert AgentRun.objects.get(request=request).status == AgentRun.Status.SUCCESS
    assert [r.status for r in responses(request)] == ["success"]


@pytest.mark.parametrize("everything", [False, True], ids=["queue lost", "all Redis data lost"])
def test_a_lost_approval_is_taken_up_again(registry, script, calls, admin_user, everything):
    request, run = dispatching(registry, script)
    queued_not_run()
    assert run.waiting_for.approve(admin_user, assertion=ASSERTION)
    lose_what_is_queued(everything)
    app.conf.task_always_eager = True

    recover_calls()
    assert calls() == []  # decided a moment ago: its task may still be on its way
    Ceremony.objects.filter(pk=run.waiting_for_id).update(decided_at=timezone.now() - LONG_AGO)
    recover_calls()
    recover_calls()  # nothing left to take up

    run.refresh_from_db()
    if not everything:
        assert len(calls("send_email")) == 1
        assert run.status == AgentRun.Status.SUCCESS
        assert [r.status for r in responses(request)] == ["success"]
        return
    # The strict call's assertion went with Redis: refused at the re-check, visibly, unrun.
    assert calls() == []
    assert run.status == AgentRun.Status.ERROR
    assert run.result["actions"][0]["outcome"]["error"]["code"] == "AUTH_REQUIRED"
    assert [r.status for r in responses(request)] == ["error"]


def test_a_lost_continuation_is_told_again(registry, script, calls, admin_user):
    request, run = dispatching(registry, script)
    queued_not_run()
    ceremony = run.waiting_for
    assert ceremony.approve(admin_user, assertion=ASSERTION)
    lifecycle.resume(ceremony.pk)  # the call ran; its continuation is lost with the broker
    lose_what_is_queued()
    app.conf.task_always_eager = True
    assert len(calls("send_email")) == 1
    AgentRun.objects.filter(pk=run.pk).update(updated_at=timezone.now() - LONG_AGO)

    recover()

    run.refresh_from_db()
    assert run.status == AgentRun.Status.SUCCESS and len(calls("send_email")) == 1
    assert [r.status for r in responses(request)] == ["success"]


def executing_since(registry, script, admin_user, sent):
    """A held call approved, its task lost, executing since `sent`: what a worker SIGKILLed
    between taking the call and recording its answer leaves (the request, run and call)."""
    request, run = dispatching(registry, script)
    ceremony = run.waiting_for
    queued_not_run()
    assert ceremony.approve(admin_user, assertion=ASSERTION)
    lose_what_is_queued()
    app.conf.task_always_eager = True
    Ceremony.objects.filter(pk=ceremony.pk).update(
        status=Ceremony.Status.EXECUTING, executed_at=sent
    )
    return request, run, ceremony


def test_a_call_whose_worker_died_mid_call_is_outcome_unknown_never_resent(
    registry, script, calls, admin_user
):
    sent = timezone.now() - timedelta(seconds=settings.MCPLET_TOOL_TIMEOUT)
    request, run, ceremony = executing_since(registry, script, admin_user, sent)
    recover_calls()
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.EXECUTING  # maybe still running: within its grace
    Ceremony.objects.filter(pk=ceremony.pk).update(executed_at=sent - LONG_AGO)

    recover_calls()

    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.OUTCOME_UNKNOWN
    assert calls() == []  # never sent again
    run.refresh_from_db()
    assert run.status == AgentRun.Status.ERROR
    assert run.result["actions"][0]["outcome"]["error"]["code"] == "X_OUTCOME_UNKNOWN"
    assert [r.status for r in responses(request)] == ["error"]


def test_a_run_whose_worker_died_is_advanced_again_after_its_lease(registry, script):
    dispatch = registry["dispatch"]
    dispatch.model = script({"dispatch-agent": [{"json": {"sent": 0}}]})
    dispatch.save()
    queued_not_run()
    request = bus.send_task("director", "dispatch-agent", {"store": "shinjuku"})
    run = AgentRun.objects.create(
        agent=dispatch,
        request=request,
        provenance=request.provenance,
        context_id=str(request.context_id),
        transcript=[{"role": "user", "content": "Your task: {}"}],
    )
    assert AgentRun.claim(run.pk, "a-worker-then-SIGKILLed")
    lose_what_is_queued()
    app.conf.task_always_eager = True
    AgentRun.objects.filter(pk=run.pk).update(updated_at=timezone.now() - LONG_AGO)
    A2AMessage.objects.filter(pk=request.pk).update(state=A2AMessage.State.DELIVERED)

    recover()
    run.refresh_from_db()
    assert run.status == AgentRun.Status.RUNNING  # its lease still holds it
    AgentRun.objects.filter(pk=run.pk).update(lease_until=timezone.now() - timedelta(seconds=1))

    recover()

    run.refresh_from_db()
    assert run.status == AgentRun.Status.SUCCESS
    assert [r.status for r in responses(request)] == ["success"]


def test_a_call_waiting_for_a_persons_form_is_not_abandoned(registry, script, calls, admin_user):
    """The server asked a person for a form during the call (2025-11-25 elicitation/create):
    its worker waits for that person, so the call is not abandoned while the form is open, nor
    before the call's own clock, started again once the form closed, has run out."""
    sent = timezone.now() - timedelta(seconds=settings.MCPLET_TOOL_TIMEOUT) - LONG_AGO
    *_, ceremony = executing_since(registry, script, admin_user, sent)
    asker = ceremony.asker.nobody_waits()
    form = tool_call.open_call(
        Ceremony.Kind.FORM,
        ceremony.mcplet,
        ceremony.arguments,
        asker,
        expires_at=timezone.now() + timedelta(seconds=settings.MCPLET_ELICITATION_WAIT),
    )
    Ceremony.objects.filter(pk=form.pk).update(created_at=sent + timedelta(seconds=1))

    recover_calls()  # the form is open: the worker waits for its person
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.EXECUTING

    # The form closed long ago (expired unanswered), and the call's clock ran out since.
    Ceremony.objects.filter(pk=form.pk).update(expires_at=sent + timedelta(seconds=2))
    recover_calls()
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.OUTCOME_UNKNOWN
    assert calls() == []
