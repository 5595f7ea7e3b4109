"""Our agents call remote A2A agents: the peer is the a2a-sdk's own server (tests/a2a_sdk/server.py,
in the SDK's virtualenv), reached by our client (a2a/outbound.py). A hand-off to it and its answer
back stay in one trace; a remote that is unreachable or says something that is not A2A is a clear
error in the workflow; a remote agent is granted no pools (tests/e2e/test_remote_agent_admin.py:
an operator registers one in Chromium)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from a2a import bus, outbound
from a2a.models import A2AMessage
from agents import runner
from agents.models import Agent, AgentRun
from mcplet_host import audit
from mcplet_host.models import AuditEvent
from tests.a2a_sdk import sdk
from tests.processes import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

TOKEN = "remote-secret-7f3a"


@pytest.fixture(scope="module")
def peer():
    with sdk.server(TOKEN) as base:
        yield base


def remote(base, token=TOKEN, agent_id="weather-oracle"):
    agent = Agent(
        agent_id=agent_id,
        display_name="Weather oracle",
        kind=Agent.Kind.REMOTE,
        card_url=base,
        credentials={"Authorization": f"Bearer {token}"},
    )
    agent.refresh_card()
    agent.save()
    return agent


def response_to(request):
    return A2AMessage.objects.get(reply_to=request.message_id).body


def test_a_hand_off_to_a_remote_agent_and_its_answer_back_in_one_trace(
    peer, registry, director, script, calls
):
    oracle = remote(peer)
    info, planning = registry["info"], registry["planning"]
    model = script(
        {
            "info-gathering-agent": [{"json": {"analysis": "rain tomorrow"}}],
            "planning-agent": [
                {"expect": {"user_contains": ["Weather oracle", "rain tomorrow"]}, "json": {}}
            ],
        }
    )
    info.model, info.hands_off_to = model, oracle
    planning.model = model
    oracle.hands_off_to = planning
    for agent in (info, planning, oracle):
        agent.save()

    request = bus.send_task("director", "info-gathering-agent", {"store": "shinjuku"})

    context = str(request.context_id)
    runs = {run.agent.agent_id: run for run in AgentRun.objects.select_related("agent")}
    assert {name: run.status for name, run in runs.items()} == {
        "info-gathering-agent": "success",
        "weather-oracle": "success",
        "planning-agent": "success",
    }
    answer = runs["weather-oracle"].result
    assert answer["answeredBy"] == "Weather oracle"
    sent = answer["received"]  # what the SDK's executor found in our DataPart: the §18 request
    assert (sent["type"], sent["senderId"], sent["recipientId"]) == (
        "task_request",
        "info-gathering-agent",
        "weather-oracle",
    )
    assert sent["payload"]["parameters"] == {"analysis": "rain tomorrow"}
    assert sent["contextId"] == context
    remote_task = runs["weather-oracle"].transcript[-1]
    assert remote_task["contextId"] == context  # the remote task is in our contextId too
    assert remote_task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert runs["planning-agent"].parameters == answer  # the answer went on in the workflow
    assert {r.context_id for r in runs.values()} == {context}
    assert {str(m.context_id) for m in A2AMessage.objects.all()} == {context}
    assert [
        (m.sender_id, m.recipient_id) for m in A2AMessage.objects.filter(type="task_request")
    ] == [
        ("director", "info-gathering-agent"),
        ("info-gathering-agent", "weather-oracle"),
        ("weather-oracle", "planning-agent"),
    ]
    to_oracle = A2AMessage.objects.get(type="task_request", recipient_id="weather-oracle")
    assert response_to(to_oracle)["status"] == ("success")
    sent_event = AuditEvent.objects.get(event_type="a2a.remote.sent")
    assert sent_event.trace_id == context
    assert sent_event.details["remoteTaskId"] == remote_task["id"]
    finished = AuditEvent.objects.filter(event_type="agent.run.finished", actor_id="weather-oracle")
    assert finished.get().trace_id == context
    # Being called gave it nothing of ours: the planning agent acts with the director's chain.
    assert runs["planning-agent"].authority.chain == (
        "director",
        "info-gathering-agent",
        "weather-oracle",
    )
    assert oracle.accessible_pools.count() == 0 and calls() == []


def test_the_director_targets_a_remote_agent_like_an_internal_one(peer, registry, director):
    oracle = remote(peer)
    director.targets.add(oracle)
    request = bus.send_task("director", "weather-oracle", {"instruction": "tomorrow?"})
    response = response_to(request)
    assert response["status"] == "success"
    assert response["payload"]["result"]["received"]["payload"]["parameters"] == {
        "instruction": "tomorrow?"
    }


def test_a_redelivered_run_follows_the_remote_task_it_already_sent(peer, registry, director):
    """A worker that dies after SendMessage: the next one finds the remote task in the run and
    only follows it (GetTask), so the remote agent is not sent the request twice."""
    oracle = remote(peer)
    oracle.enabled = False  # the first delivery is refused, so the run is ours to drive
    oracle.save()
    request = bus.send_task("director", "weather-oracle", {"n": 1})
    A2AMessage.objects.filter(reply_to=request.message_id).delete()
    A2AMessage.objects.filter(pk=request.pk).update(state=A2AMessage.State.QUEUED)
    message = {
        "messageId": "earlier",
        "contextId": str(request.context_id),
        "role": "ROLE_USER",
        "parts": [{"data": {"sent": "before the crash"}}],
    }
    url, credentials = outbound.jsonrpc_url(oracle.remote_card), oracle.credentials
    task = outbound.send_message(url, credentials, message)["task"]
    run = runner.start(request, oracle)
    run.transcript, run.lease_until = [task], None  # the dead worker's lease ran out
    run.save()

    runner.advance(run.pk)

    run.refresh_from_db()
    assert run.status == "success"
    assert run.result["received"] == {"sent": "before the crash"}  # that task's answer
    assert not AuditEvent.objects.filter(event_type="a2a.remote.sent").exists()


def test_wrong_credentials_are_a_clear_error_and_nothing_is_handed_off(peer, registry, director):
    oracle = remote(peer, token="not-the-token")
    oracle.hands_off_to = registry["planning"]
    oracle.save()
    request = bus.send_task("director", "weather-oracle", {})
    error = response_to(request)["payload"]["error"]
    assert error["code"] == "X_REMOTE"
    assert "HTTP 401" in error["message"] and "not-the-token" not in error["message"]
    assert not AgentRun.objects.filter(agent=registry["planning"]).exists()
    event = AuditEvent.objects.get(event_type="agent.run.finished", actor_id="weather-oracle")
    assert event.result == audit.FAILURE and event.trace_id == str(request.context_id)


# --- a hostile remote agent -----------------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000
ANSWERS = {  # path → (HTTP status, body of its JSON-RPC answer), the id echoed where it can be
    "not-json": (200, "this is not JSON {"),
    "deep": (200, DEEP),
    "wrong-schema": (200, '{"jsonrpc": "2.0", "id": ID, "result": {"task": {"id": 5}}}'),
    "huge-number": (200, '{"jsonrpc": "2.0", "id": ID, "result": {"task": 1e400}}'),
    "other-id": (200, '{"jsonrpc": "2.0", "id": "someone-else", "result": {}}'),
    "rpc-error": (200, '{"jsonrpc": "2.0", "id": ID, "error": {"code": -32001, "message": "no"}}'),
    "server-error": (500, "oops"),
}


@pytest.fixture(scope="module")
def hostile():
    """A remote agent whose card is fine and whose JSON-RPC endpoint at /<path> answers
    ANSWERS[path]."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            path = self.path.removesuffix(outbound.CARD_PATH).strip("/")
            card = {
                "name": "Hostile",
                "description": "Says anything.",
                "version": "1",
                "supportedInterfaces": [
                    {
                        "url": f"{base}/{path}",
                        "protocolBinding": "JSONRPC",
                        "protocolVersion": "1.0",
                    }
                ],
                "capabilities": {},
                "defaultInputModes": ["application/json"],
                "defaultOutputModes": ["application/json"],
                "skills": [],
            }
            self.reply(200, json.dumps(card))

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, text = ANSWERS[self.path.strip("/")]
            self.reply(status, text.replace("ID", json.dumps(body["id"])))

        def reply(self, status, text):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(text.encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield base
    server.shutdown()


@pytest.mark.parametrize(
    "path, said",
    [
        ("not-json", "not JSON"),
        ("deep", "not JSON"),
        ("wrong-schema", "not an A2A SendMessageResponse"),
        ("huge-number", "not an A2A SendMessageResponse"),
        ("other-id", "not a JSON-RPC answer to our request"),
        ("rpc-error", "error -32001: no"),
        ("server-error", "HTTP 500"),
    ],
)
def test_a_hostile_remote_is_a_clear_error_in_the_workflow(hostile, registry, director, path, said):
    oracle = remote(f"{hostile}/{path}")
    oracle.hands_off_to = registry["planning"]
    oracle.save()
    request = bus.send_task("director", "weather-oracle", {})
    response = response_to(request)
    assert response["status"] == "error"
    assert said in response["payload"]["error"]["message"]
    assert not AgentRun.objects.filter(agent=registry["planning"]).exists()


def test_an_unreachable_remote_is_a_clear_error(peer, registry, director):
    oracle = remote(peer)
    closed = f"http://127.0.0.1:{free_port()}/"
    oracle.remote_card["supportedInterfaces"][0]["url"] = closed  # it moved since its card
    oracle.save()
    request = bus.send_task("director", "weather-oracle", {})
    error = response_to(request)["payload"]["error"]
    assert error["code"] == "X_REMOTE" and "cannot be reached" in error["message"]


# --- admin ----------------------------------------------------------------------------------


def test_a_remote_agent_is_granted_no_pools(staff_client, peer, registry):
    answer = staff_client.post(
        "/admin/agents/agent/add/",
        {
            "agent_id": "weather-oracle",
            "display_name": "Oracle",
            "kind": "remote",
            "card_url": peer,
            "credentials": "",
            "accessible_pools": [registry["info-pool"].pk],
            "version": "1.0.0",
            "max_steps": 8,
            "token_budget": 60000,
            "max_retries": 3,
            "backoff_seconds": 5,
            "overlap_policy": "skip",
            "lock_timeout": 120,
            "input_schema": "{}",
            "output_schema": "{}",
        },
    )
    assert answer.status_code == 200
    assert "A remote agent holds none" in answer.content.decode()
    assert not Agent.objects.filter(agent_id="weather-oracle").exists()
