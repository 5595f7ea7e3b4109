"""A command hands its call to the running host (mcplet_host.handoff): with Redis through a
task the host's worker claims, embedded through a signed, fresh, single-use request. Anything
else sent to the host's endpoint is refused with a 4xx and audited, and runs nothing (the MCP
server's own call log). The whole way, with real processes and a wallet:
tests/e2e/test_cli_handoff_browser.py."""

import json
import time
import urllib.request

import pytest
from django.core.cache import cache

from held.models import Ceremony
from mcplet_host import handoff
from mcplet_host.models import AuditEvent
from passkey import links

pytestmark = pytest.mark.django_db

ENDPOINT = "/host/calls/"
CALL = {
    "agent": "planning-agent",
    "tool": "query_crm",
    "arguments": {"filter": "rain"},
    "surface": "model",
    "trace": "",
}


@pytest.fixture(autouse=True)
def embedded(settings):
    """The endpoint is the embedded mode's (with Redis, commands queue their calls)."""
    settings.EMBEDDED = True


def signed(body=None, **changes):
    body = {**CALL, "issued": time.time(), "nonce": "n" * 24, **(body or {}), **changes}
    return json.dumps(body).encode()


def post(client, payload, signature=None, **headers):
    if signature is None:
        signature = handoff.sign(payload)
    if signature:
        headers["HTTP_X_MCPLET_SIGNATURE"] = signature
    return client.post(ENDPOINT, payload, content_type="application/json", **headers)


def refused(reason):
    (event,) = AuditEvent.objects.filter(event_type=handoff.REFUSED_EVENT)
    assert event.details["reason"] == reason and event.result == "BLOCKED"
    return event


def test_a_signed_call_runs_in_the_host(client, registry, calls):
    response = post(client, signed())
    assert response.status_code == 200
    answer = response.json()
    assert answer["status"] == "executed" and answer["ceremony"] is None
    assert answer["envelope"]["result"]["arguments"] == {"filter": "rain"}
    assert [c["name"] for c in calls()] == ["query_crm"]


def test_a_held_call_is_held_by_the_host(client, registry, calls):
    body = {"agent": "dispatch-agent", "tool": "send_email", "surface": "app"}
    body["arguments"] = {"to": ["a@example.jp"], "body": "hi"}
    answer = post(client, signed(body)).json()
    ceremony = Ceremony.objects.get(token=answer["ceremony"])
    assert answer["status"] == "pending" and ceremony.status == Ceremony.Status.PENDING
    assert calls() == []


def test_an_unknown_agent_runs_nothing(client, registry, calls):
    answer = post(client, signed(agent="nobody")).json()
    assert answer["status"] == "refused" and "nobody" in answer["error"] and calls() == []


def nan_issued():
    return signed().replace(b'"issued": ', b'"issued": NaN, "was": ')


# Built when the test runs (a signed call is fresh for a minute): (payload, signature or None).
HOSTILE = {
    "unsigned": (lambda: (signed(), ""), 401, "unsigned"),
    "wrong key": (lambda: (signed(), "0" * 64), 403, "bad_signature"),
    "not ascii": (lambda: (signed(), "é" * 64), 403, "bad_signature"),
    "edited": (lambda: (signed(), handoff.sign(signed(tool="x"))), 403, "bad_signature"),
    "not json": (lambda: (b"not json", None), 400, "malformed"),
    "a list": (lambda: (b"[1, 2]", None), 400, "malformed"),
    "not utf-8": (lambda: (b"\xff\xfe", None), 400, "malformed"),
    "arguments": (lambda: (signed(arguments=[1]), None), 400, "malformed"),
    "long trace": (lambda: (signed(trace="t" * 65), None), 400, "malformed"),
    "short nonce": (lambda: (signed(nonce="short"), None), 400, "malformed"),
    "no agent": (lambda: (signed(agent=None), None), 400, "malformed"),
    "issued text": (lambda: (signed(issued="now"), None), 400, "malformed"),
    "issued bool": (lambda: (signed(issued=True), None), 400, "malformed"),
    "issued NaN": (lambda: (nan_issued(), None), 400, "malformed"),
    "NUL": (lambda: (signed(arguments={"filter": "a\u0000b"}), None), 400, "malformed"),
    "old": (lambda: (signed(issued=time.time() - 3600), None), 403, "stale"),
    "future": (lambda: (signed(issued=time.time() + 3600), None), 403, "stale"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_what_is_not_a_fresh_signed_call_is_refused_and_audited(client, registry, calls, case):
    build, status, reason = HOSTILE[case]
    response = post(client, *build())
    assert response.status_code == status and response.json()["reason"] == reason
    event = refused(reason)
    assert event.actor_id == "handoff" and event.details["remote"] == "127.0.0.1"
    assert calls() == []


def test_a_call_is_run_once_however_often_it_is_sent(client, registry, calls):
    payload = signed()
    assert post(client, payload).status_code == 200
    response = post(client, payload)
    assert response.status_code == 409 and response.json()["reason"] == "replayed"
    refused("replayed")
    assert len(calls()) == 1


def test_with_redis_nothing_is_taken_here(client, registry, calls, settings):
    settings.EMBEDDED = False
    response = post(client, signed())
    assert response.status_code == 404 and response.json()["reason"] == "not_embedded"
    refused("not_embedded")
    assert calls() == []


def test_other_methods_and_oversized_bodies_are_refused(client, registry, calls, settings):
    response = client.get(ENDPOINT)
    assert response.status_code == 405 and response.json()["reason"] == "method"
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    response = post(client, signed(arguments={"filter": "x" * 200}))
    assert response.status_code == 413 and response.json()["reason"] == "too_large"
    reasons = AuditEvent.objects.filter(event_type=handoff.REFUSED_EVENT)
    assert sorted(e.details["reason"] for e in reasons) == ["method", "too_large"]
    assert calls() == []


# --- the command's side ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_embedded_a_command_posts_its_call_to_the_running_host(
    live_server, registry, calls, settings, monkeypatch
):
    settings.EMBEDDED = True
    links.publish("http://localhost:8766", live_server.url)
    monkeypatch.setattr(links, "_serving_pages", False)  # this test plays the command
    outcome = handoff.call("planning-agent", "query_crm", {"filter": "rain"})
    assert outcome["status"] == "executed" and len(calls()) == 1
    assert not AuditEvent.objects.filter(event_type=handoff.REFUSED_EVENT).exists()


@pytest.mark.django_db(transaction=True)
def test_embedded_a_host_that_refuses_is_said_so(
    live_server, registry, calls, settings, monkeypatch
):
    settings.EMBEDDED = True
    links.publish("http://localhost:8766", live_server.url)
    request = urllib.request.Request

    def signed_with_another_key(url, data=None, headers=None, **options):
        headers = {**headers, handoff.SIGNATURE_HEADER: "0" * 64}
        return request(url, data=data, headers=headers, **options)

    monkeypatch.setattr(urllib.request, "Request", signed_with_another_key)
    with pytest.raises(handoff.HandOffFailed, match=r"refused the call \(403\)"):
        handoff.call("planning-agent", "query_crm", {"filter": "rain"})
    assert calls() == []
    refused("bad_signature")


def test_embedded_without_a_running_host_the_command_runs_it(registry, settings, command_host):
    settings.EMBEDDED = True
    assert handoff.call("planning-agent", "query_crm", {"filter": "rain"}) is None  # none
    links.publish("http://localhost:8766", command_host)  # published, but nothing listens
    assert handoff.call("planning-agent", "query_crm", {"filter": "rain"}) is None


@pytest.fixture
def command_host():
    """An address where nothing listens."""
    from tests.processes import free_port

    return f"http://127.0.0.1:{free_port()}"


@pytest.mark.usefixtures("eager")
def test_with_redis_the_hosts_worker_runs_it(registry, calls, settings, monkeypatch):
    settings.EMBEDDED = False
    taken = []
    monkeypatch.setattr(handoff, "run", lambda body: taken.append(body) or {"status": "x"})
    assert handoff.call("planning-agent", "query_crm", {"filter": "rain"}) == {"status": "x"}
    assert taken == [{**CALL}]


def test_with_redis_and_no_worker_the_command_claims_it_back(
    registry, calls, settings, monkeypatch
):
    """Nobody took the task in time: the command runs the call; a worker that takes the task
    later runs nothing."""
    settings.EMBEDDED = False
    sent = []

    class Queued:
        def forget(self):
            pass

    monkeypatch.setattr(handoff, "enqueue", lambda name, args, **kw: sent.append(args) or Queued())
    monkeypatch.setattr(handoff, "CLAIM_WAIT", 0.3)
    assert handoff.call("planning-agent", "query_crm", {"filter": "rain"}) is None
    ((claim, body),) = sent
    assert cache.get(claim) == "command"
    assert handoff.take(claim, body) == {"status": "withdrawn", "envelope": None, "ceremony": None}
    assert calls() == []
