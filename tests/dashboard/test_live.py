"""The live stream: the real ASGI application (origin check, session auth, the consumer) through
`WebsocketCommunicator`, against the real Redis channel layer (and the in-memory one of the
embedded mode). Broadcasts come from the signal receivers, as in production."""

import asyncio
import copy
import runpy
import uuid
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client
from django.utils.module_loading import import_string
from redis.connection import parse_url

import mcplet_host
from agents import ending
from agents.models import Agent, AgentRun
from dashboard import receivers
from held.kinds import result as held_result
from held.models import Asker
from mcplet_host import audit, background
from mcplet_host.asgi import application
from tests.mcplet_host.test_background import busy

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = b"http://localhost:8000"
EMBEDDED = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


def headers(user=None, origin=ORIGIN, host=b"localhost:8000"):
    found = [(b"host", host)] + ([(b"origin", origin)] if origin else [])
    if user is not None:
        client = Client()
        client.force_login(user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
        found.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    return found


def connect(hdrs):
    """(connected, close code) of one attempt to open the dashboard's socket."""

    async def attempt():
        socket = WebsocketCommunicator(application, "/ws/dashboard/", headers=hdrs)
        connected, code = await socket.connect(timeout=10)
        await socket.disconnect()
        return connected, code

    return async_to_sync(attempt)()


async def opened(signed_in):
    """A staff socket, its hello read."""
    socket = WebsocketCommunicator(application, "/ws/dashboard/", headers=signed_in)
    assert (await socket.connect(timeout=10))[0]
    await socket.receive_json_from(timeout=5)  # hello
    return socket


async def wait_for(socket, wanted, timeout=10):
    """The first message `wanted(message)` accepts. Others (the group may be shared with other
    test runs on the same Redis) are skipped."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            raise AssertionError("the expected message did not arrive")
        message = await socket.receive_json_from(timeout=left)
        if wanted(message):
            return message


def stream_reaches_staff(staff):
    """Audit events, run state and approvals, each after its commit, to a staff socket."""
    trace = str(uuid.uuid4())
    agent = Agent.objects.create(agent_id="info-gathering-agent", display_name="Info")

    def make_run():
        return AgentRun.objects.create(agent=agent, context_id=trace)

    def finish(run):  # the runner's own end, as a worker ends a run
        run.steps = 2
        assert ending.finish(run, AgentRun.Status.SUCCESS, result={"answer": "ok"})

    def hold():
        return held_result.hold(
            Asker("planning-agent", trace_id=trace),
            {"plan": "dessert", "secret": "not for the stream"},
            "Approve the plan",
        )

    signed_in = headers(staff)

    async def session():
        socket = WebsocketCommunicator(application, "/ws/dashboard/", headers=signed_in)
        connected, _ = await socket.connect(timeout=10)
        assert connected
        assert await socket.receive_json_from(timeout=5) == {"type": "hello", "user": "operator"}

        event = await database_sync_to_async(audit.record)(
            "TOOL_EXECUTED", actor_type="agent", actor_id="info", target_tool="query_crm",
            trace_id=trace, details={"duration_ms": 12},
        )  # fmt: skip
        message = await wait_for(
            socket,
            lambda m: m["type"] == "audit" and m["events"][0]["trace_id"] == trace,
        )
        assert message["events"] == [{"seq": event.seq, **event.as_mgp()}]

        run = await database_sync_to_async(make_run)()
        started = await wait_for(
            socket, lambda m: m["type"] == "run" and m["run"]["id"] == str(run.pk)
        )
        assert (started["run"]["status"], started["run"]["final"]) == ("running", False)
        assert started["run"]["agent"] == "info-gathering-agent"
        assert started["run"]["url"] == f"/dashboard/runs/{trace}/#run-{run.pk}"
        await database_sync_to_async(finish)(run)
        done = await wait_for(
            socket, lambda m: m["type"] == "run" and m["run"]["id"] == str(run.pk)
        )
        assert (done["run"]["status"], done["run"]["final"], done["run"]["steps"]) == (
            "success", True, 2,
        )  # fmt: skip

        ceremony = await database_sync_to_async(hold)()
        held = await wait_for(
            socket, lambda m: m["type"] == "approval" and m["approval"]["id"] == ceremony.pk
        )
        assert held["approval"]["pending"] and held["approval"]["prompt"] == "Approve the plan"
        assert held["approval"]["url"] == f"/passkey/ceremonies/{ceremony.token}/"
        assert "secret" not in str(held)  # what it would run stays on the staff pages
        await socket.disconnect()

    async_to_sync(session)()


@pytest.mark.services
def test_staff_get_events_runs_and_approvals_over_redis(staff):
    layer = settings.CHANNEL_LAYERS["default"]["BACKEND"]
    assert layer == "channels_redis.pubsub.RedisPubSubChannelLayer"
    stream_reaches_staff(staff)


def test_the_embedded_mode_streams_over_the_in_memory_layer(staff, settings):
    settings.CHANNEL_LAYERS = EMBEDDED
    stream_reaches_staff(staff)


@pytest.mark.services
def test_a_quiet_socket_stays_open(staff, settings):
    """A socket that hears nothing for longer than redis-py 8's 5 s socket timeout still hears
    the next message (the sorted-set layer's blocking 5 s receive dropped such sockets,
    channels_redis#422; the pub/sub layer reads with short timeouts)."""
    # The project's layer, on a prefix of its own: quiet, whatever other test runs send.
    layers = copy.deepcopy(settings.CHANNEL_LAYERS)
    layers["default"]["CONFIG"]["prefix"] = f"mcplet:channels:quiet-{uuid.uuid4().hex[:8]}"
    settings.CHANNEL_LAYERS = layers
    signed_in = headers(staff)
    trace = str(uuid.uuid4())

    async def session():
        socket = await opened(signed_in)
        await asyncio.sleep(7)  # longer than one blocking receive
        await database_sync_to_async(audit.record)("TOOL_EXECUTED", trace_id=trace)
        await wait_for(
            socket, lambda m: m["type"] == "audit" and m["events"][0]["trace_id"] == trace
        )
        await socket.disconnect()

    async_to_sync(session)()


@pytest.mark.services
def test_the_anonymous_are_refused(staff):
    assert connect(headers()) == (False, 4403)


@pytest.mark.services
def test_a_non_staff_user_is_refused(django_user_model):
    manager = django_user_model.objects.create_user("manager", password="pw-manager-1")
    assert connect(headers(manager)) == (False, 4403)


@pytest.mark.services
def test_an_inactive_staff_member_is_refused(staff):
    staff.is_active = False
    staff.save()
    assert connect(headers(staff)) == (False, 4403)


@pytest.mark.services
@pytest.mark.parametrize(
    "origin",
    [
        b"http://evil.example",
        b"http://localhost.evil.example:8000",
        b"null",
        None,
        b"http://localhost:9999",  # another site on the same host: the port is the origin's
        b"http://localhost",
        b"https://localhost:8000",
        b"http://127.0.0.1:8000",
    ],
)
def test_a_foreign_or_missing_origin_is_refused(staff, origin):
    # With the staff member's own session cookie: what a cross-site page would send.
    connected, _ = connect(headers(staff, origin=origin))
    assert not connected


@pytest.mark.services
@pytest.mark.parametrize("host", [b"evil.example:8000", b"localhost:9999", None])
def test_the_origin_must_be_the_hosts_own(staff, host):
    hdrs = [h for h in headers(staff) if h[0] != b"host"] + ([(b"host", host)] if host else [])
    assert not connect(hdrs)[0]


@pytest.mark.services
def test_a_trusted_origin_may_connect(staff, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://ops.example"]
    assert connect(headers(staff, origin=b"https://ops.example"))[0]
    assert not connect(headers(staff, origin=b"https://ops.example:8443"))[0]


@pytest.mark.services
def test_staff_with_an_allowed_origin_connect(staff):
    assert connect(headers(staff))[0]


@pytest.mark.services
def test_broadcasts_gathered_in_one_group_message_arrive_one_frame_each(staff, caplog):
    """Under load a process sends what it queued meanwhile as one group message; the socket
    still gets each payload as a frame of its own, in order — built by the publishing thread,
    one that fails to build left out."""
    signed_in = headers(staff)
    trace = str(uuid.uuid4())

    def broken(instance):
        raise KeyError("gone")

    async def session():
        socket = await opened(signed_in)
        gate = busy(background.sends, "test:live:held")  # the publishing thread is busy meanwhile
        for i in range(3):
            events = [{"trace_id": trace, "seq": i}]
            receivers.broadcast(receivers.Later(lambda e: {"type": "audit", "events": e}, events))
            receivers.broadcast(receivers.Later(broken, i))
        gate.set()
        frames = [
            await wait_for(
                socket, lambda m: m["type"] == "audit" and m["events"][0]["trace_id"] == trace
            )
            for _ in range(3)
        ]
        assert [frame["events"][0]["seq"] for frame in frames] == [0, 1, 2]
        await socket.disconnect()

    async_to_sync(session)()
    assert "dashboard message not built: KeyError: 'gone'" in caplog.text


@pytest.mark.services
def test_a_host_on_another_database_of_the_same_redis_is_not_heard(staff, monkeypatch):
    """Redis's pub/sub channels are server-wide: a host on another database of the same server
    (the project's settings, read with its REDIS_URL, through its layer's group_send) publishes
    where this host's staff do not listen, and this host's own broadcast (its publishing
    thread, as every audited commit sends) still arrives."""
    db = parse_url(settings.REDIS_URL).get("db", 0)
    monkeypatch.setenv("REDIS_URL", settings.REDIS_URL.rsplit("/", 1)[0] + f"/{(db + 1) % 16}")
    other = runpy.run_path(Path(mcplet_host.__file__).with_name("settings.py"))["CHANNEL_LAYERS"]
    signed_in = headers(staff)
    theirs, ours = str(uuid.uuid4()), str(uuid.uuid4())

    def payload(trace):
        return {"type": "audit", "events": [{"trace_id": trace, "seq": 1}]}

    async def session():
        socket = await opened(signed_in)
        layer = import_string(other["default"]["BACKEND"])(**other["default"]["CONFIG"])
        message = {"type": receivers.MESSAGE_TYPE, "payloads": [payload(theirs)]}
        await layer.group_send(receivers.GROUP, message)
        receivers.broadcast(payload(ours))
        heard = await wait_for(socket, lambda m: m["type"] == "audit")
        assert heard["events"][0]["trace_id"] == ours  # theirs was sent first, and not heard
        await socket.disconnect()

    async_to_sync(session)()


def test_a_broken_channel_layer_never_breaks_the_caller(staff, monkeypatch, caplog):
    def broken():
        raise ConnectionError("redis is down")

    monkeypatch.setattr(receivers, "get_channel_layer", broken)
    event = audit.record("TOOL_EXECUTED", actor_type="agent", actor_id="info")
    agent = Agent.objects.create(agent_id="info-gathering-agent", display_name="Info")
    run = AgentRun.objects.create(agent=agent, context_id=str(uuid.uuid4()))
    assert event.pk and run.pk
    assert "dashboard broadcast failed: ConnectionError: redis is down" in caplog.text


def test_a_broadcast_waits_for_the_commit(staff, monkeypatch, django_capture_on_commit_callbacks):
    sent = []
    monkeypatch.setattr(receivers, "broadcast", sent.append)
    agent = Agent.objects.create(agent_id="info-gathering-agent", display_name="Info")
    sent.clear()  # the agent's own configuration event, committed already
    from django.db import transaction

    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        AgentRun.objects.create(agent=agent, context_id=str(uuid.uuid4()))
        assert sent == []  # nothing that could still roll back
    assert [m["type"] for m in receivers.built(sent)] == ["run"]


def test_a_message_is_built_off_the_callers_thread_from_the_state_that_was_saved(
    staff, monkeypatch, django_capture_on_commit_callbacks, django_assert_num_queries
):
    sent = []
    monkeypatch.setattr(receivers, "broadcast", sent.append)
    agent = Agent.objects.create(agent_id="info-gathering-agent", display_name="Info")
    run = AgentRun.objects.create(agent=agent, context_id=str(uuid.uuid4()))
    run = AgentRun.objects.get(pk=run.pk)  # its agent not read yet
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        run.save()  # the receiver reads the agent here, on the caller's thread
    run.status = AgentRun.Status.SUCCESS  # changed after the save
    with django_assert_num_queries(0):  # as the publishing thread builds it: no query
        (payload,) = receivers.built(sent)
    assert payload["run"]["status"] == AgentRun.Status.RUNNING
    assert payload["run"]["agent"] == "info-gathering-agent"


def test_a_held_call_on_a_trace_the_trace_page_cannot_show_still_reaches_the_live_view(
    staff, monkeypatch, django_capture_on_commit_callbacks
):
    """`manage.py call_tool --trace demo-1` holds a call on a trace that is not a contextId: its
    approval is broadcast all the same, with no link to a trace page (it was left out)."""
    sent = []
    monkeypatch.setattr(receivers, "broadcast", sent.append)
    with django_capture_on_commit_callbacks(execute=True):
        ceremony = held_result.hold(Asker("info-gathering-agent", trace_id="demo-1"), {}, "ok?")
    (approval,) = [m for m in receivers.built(sent) if m["type"] == "approval"]
    assert approval["approval"]["id"] == ceremony.pk
    assert approval["approval"]["trace_url"] == ""
    assert approval["approval"]["url"] == ceremony.get_absolute_url()
