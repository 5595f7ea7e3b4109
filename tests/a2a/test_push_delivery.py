"""Push notifications as served in production: daphne and a real Celery worker, the real Redis
and the test database. The unmodified a2a-sdk client sends a task that waits for a person, with
a webhook the test runs (tests/a2a_sdk/receiver.py, reading each POST with the SDK's own
StreamResponse and checking its credentials). The webhook hears working → auth-required, then,
once a person approved, working → the artifact → completed → the final Task, in order, without
the partner polling; its first POST fails and the worker sends the very same body again."""

import pytest

from a2a.models import PartnerKey, PushDelivery
from held.models import Ceremony
from mcplet_host.models import AuditEvent
from tests import processes
from tests.a2a.test_standard_bindings import dispatch_script, user_message
from tests.a2a.test_standard_streaming import states
from tests.a2a_sdk import sdk
from tests.processes import wait_until

script = processes.script  # in a folder the host processes know from the start

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

HOST_ENVIRONMENT = {"MCPLET_A2A_PUSH_BACKOFF": "1"}  # retries after 1 s, 2 s…
AUTHORIZATION, TOKEN = "Bearer hook-secret-1", "notification-token-1"


def taken(received):
    return [seen["event"] for seen in received() if seen["status"] == 200]


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
def test_the_webhook_hears_the_approval_wait_and_the_end(
    host, peer, registry, script, calls, admin_user, eager, binding
):
    partner = registry["partner"]
    partner.callable_agents.set([registry["dispatch"]])
    partner.accessible_pools.set([registry["media-pool"]])
    partner.push_networks = "127.0.0.1/32"  # the operator allows this partner's test webhook
    partner.save()
    registry["dispatch"].model = dispatch_script(script)
    registry["dispatch"].save()
    key = PartnerKey.issue(partner, "sdk")[1]
    url = f"{host}/a2a/v1/dispatch-agent"

    with sdk.receiver(AUTHORIZATION, TOKEN, failures=1) as (hook, received):
        webhook = {
            "id": "hook-1",
            "url": hook,
            "token": TOKEN,
            "authentication": {"scheme": "Bearer", "credentials": "hook-secret-1"},
        }
        (sent,) = peer.call(
            op="send", url=url, key=key, binding=binding, message=user_message(), push=webhook
        )
        task = sent["task"]
        wait_until(
            lambda: "TASK_STATE_AUTH_REQUIRED" in states(taken(received)), "auth-required pushed"
        )
        assert states(taken(received)) == ["TASK_STATE_WORKING", "TASK_STATE_AUTH_REQUIRED"]
        first, again = received()[:2]
        assert first["status"] == 503 and again["status"] == 200
        assert first["event"] == again["event"]  # a retry is the same body: a receiver dedupes
        held = taken(received)[1]["statusUpdate"]["status"]["message"]["parts"][0]["text"]
        assert "approve send_email with a passkey" in held and calls() == []

        Ceremony.objects.get().approve(
            admin_user, assertion={"type": "passkey_assertion", "signature": "c2ln"}
        )
        wait_until(lambda: "task" in states(taken(received)), "the final task pushed")
        events = taken(received)
        assert states(events) == [
            "TASK_STATE_WORKING",
            "TASK_STATE_AUTH_REQUIRED",
            "TASK_STATE_WORKING",
            "artifactUpdate",
            "TASK_STATE_COMPLETED",
            "task",
        ]
        assert {
            e.get("statusUpdate", e.get("artifactUpdate", {})).get("taskId") for e in events[:-1]
        } == {task["id"]}
        assert events[-1]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert events[-1]["task"]["artifacts"][0]["parts"][0]["data"]["status"] == "success"
        assert len(calls("send_email")) == 1
        assert {seen["headers"]["content-type"] for seen in received()} == {"application/a2a+json"}

    trace = task["contextId"]
    audited = AuditEvent.objects.filter(trace_id=trace, event_type__startswith="a2a.push.")
    assert sorted(audited.values_list("event_type", flat=True)) == sorted(
        ["a2a.push.configured", "a2a.push.failed"] + ["a2a.push.delivered"] * 6
    )
    assert audited.get(event_type="a2a.push.failed").details["error"] == "HTTP 503"
    assert set(PushDelivery.objects.values_list("state", flat=True)) == {"delivered"}
