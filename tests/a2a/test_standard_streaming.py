"""Streaming over the standard A2A binding as served in production: daphne serving the ASGI
application and a real Celery worker, on the test database and the real Redis (pytest-django's
live_server is WSGI, which cannot stream). The unmodified a2a-sdk client streams a task that
waits for a person: working → auth-required, the approval, then working → completed and the
artifact, each pushed as it happens; a subscriber after the end is told it has ended."""

import pytest

from a2a.models import PartnerKey
from a2a.schemas import validate
from held.models import Ceremony
from tests import processes
from tests.a2a.test_standard_bindings import dispatch_script, user_message

# Scripts in a folder the module's host processes know from the start.
script = processes.script

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def states(events):
    return [
        e["statusUpdate"]["status"]["state"] if "statusUpdate" in e else sorted(e)[0]
        for e in events
    ]


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
def test_a_stream_shows_the_approval_as_it_happens(
    host, peer, registry, script, calls, admin_user, eager, binding
):
    partner = registry["partner"]
    partner.callable_agents.set([registry["dispatch"]])
    partner.accessible_pools.set([registry["media-pool"]])
    registry["dispatch"].model = dispatch_script(script)
    registry["dispatch"].save()
    key = PartnerKey.issue(partner, "sdk")[1]
    url = f"{host}/a2a/v1/dispatch-agent"

    peer.start(op="send", url=url, key=key, binding=binding, message=user_message(), stream=True)
    stream = peer.events()
    seen = []
    for event in stream:
        seen.append(event)
        if "statusUpdate" in event and event["statusUpdate"]["status"]["state"].endswith(
            "AUTH_REQUIRED"
        ):
            break
    first = seen[0]["task"]["status"]["state"]  # as the worker had got on with it
    assert first in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"), seen
    assert [first, *states(seen[1:])][-2:] == ["TASK_STATE_WORKING", "TASK_STATE_AUTH_REQUIRED"]
    held = seen[-1]["statusUpdate"]["status"]["message"]["parts"][0]["text"]
    assert "approve send_email with a passkey" in held and calls() == []

    # The approval's continuation runs here (eager), as a worker would, announcing on Redis.
    Ceremony.objects.get().approve(
        admin_user, assertion={"type": "passkey_assertion", "signature": "c2ln"}
    )
    rest = list(stream)
    assert states(rest) == ["TASK_STATE_WORKING", "artifactUpdate", "TASK_STATE_COMPLETED"]
    response = rest[1]["artifactUpdate"]["artifact"]["parts"][0]["data"]
    validate("task-response", response)
    assert response["status"] == "success" and len(calls("send_email")) == 1

    task_id = seen[0]["task"]["id"]
    late = peer.call(op="subscribe", url=url, key=key, binding=binding, id=task_id, stream=True)
    assert [e["raised"] for e in late] == ["UnsupportedOperationError"]  # it has ended
