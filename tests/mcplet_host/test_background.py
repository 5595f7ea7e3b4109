"""The process's publishing thread for sends after a commit (mcplet_host.background), against
the real Redis: what is queued for a channel while the thread is busy goes out as one message,
in order; an idle thread publishes each at once; a message is built only for a channel someone
listens to; a failure loses only what it must."""

import json
import os
import signal
import socket
import threading
import time
import uuid

import pytest
import redis
from django.conf import settings

from mcplet_host import background
from mcplet_host.background import Publisher

pytestmark = pytest.mark.services


@pytest.fixture
def heard():
    """heard(*channels) subscribes to fresh channels; heard.next() is the next (channel, items)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    pubsub = client.pubsub(ignore_subscribe_messages=True)

    class Heard:
        def __call__(self, *names):
            channels = [f"test:background:{uuid.uuid4().hex}:{name}" for name in names]
            self.subscribe(*channels)
            return channels

        def subscribe(self, *channels):
            pubsub.subscribe(*channels)
            listening(client, channels)

        def unsubscribe(self, *channels):
            pubsub.unsubscribe(*channels)
            listening(client, channels, heard=False)

        def next(self, timeout=5):
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                # None for a subscription's confirmation too: read on until the deadline.
                message = pubsub.get_message(timeout=left)
                if message is not None:
                    return message["channel"].decode(), json.loads(message["data"])
            raise AssertionError("nothing was published")

    yield Heard()
    pubsub.close()
    client.close()


def listening(client, channels, heard=True):
    """Wait until each of `channels` has a subscriber (`heard`), or none: Redis answers a
    SUBSCRIBE on its own time."""
    deadline = time.monotonic() + 5
    while any(bool(n) != heard for _, n in client.pubsub_numsub(*channels)):
        assert time.monotonic() < deadline, f"{channels} never {'' if heard else 'un'}heard"
        time.sleep(0.01)


def encode(items):
    return json.dumps(items)


def busy(sends, channel):
    """Hold the publishing thread (in an encoder) until the returned event is set. It returns
    once the thread is inside the encoder: what is gathered from then on waits for the next
    message (a thread not yet started would take it into this one). It listens on `channel`
    meanwhile: a message is built only for a channel someone listens to."""
    gate, inside = threading.Event(), threading.Event()
    client = redis.Redis.from_url(settings.REDIS_URL)
    pubsub = client.pubsub()
    pubsub.subscribe(channel)
    listening(client, [channel])

    def hold(items):
        inside.set()
        assert gate.wait(5)
        pubsub.close()
        client.close()
        return encode(items)

    sends.gather(channel, "hold", hold)
    assert inside.wait(5)
    return gate


def test_what_is_queued_while_the_thread_is_busy_goes_in_one_message_per_channel(heard):
    sends = Publisher("test-gather")
    held, audit, trace = heard("held", "audit", "trace")
    gate = busy(sends, held)
    for i in range(5):
        sends.gather(audit, i, encode)
        if i == 2:
            sends.gather(trace, "t", encode)
    gate.set()
    assert [heard.next() for _ in range(3)] == [
        (held, ["hold"]),
        (audit, [0, 1, 2, 3, 4]),
        (trace, ["t"]),
    ]

    sends.gather(audit, 5, encode)  # an idle thread: each goes alone
    assert heard.next() == (audit, [5])
    sends.gather(audit, 6, encode)
    assert heard.next() == (audit, [6])


def test_a_message_is_built_only_for_a_channel_someone_listens_to(heard):
    """Nobody listens: nothing is built. A subscriber that comes gets what comes after it; once
    it leaves, one more is built (its publication finds nobody), then none."""
    sends, built = Publisher("test-gather-heard"), []
    (marker,) = heard("marker")  # heard after each step: the thread went past what came before
    late = f"test:background:{uuid.uuid4().hex}:late"

    def recorded(items):
        built.extend(items)
        return encode(items)

    def step(item):
        sends.gather(late, item, recorded)
        sends.gather(marker, item, encode)
        assert heard.next() == (marker, [item])

    step("nobody listens")
    assert built == []
    heard.subscribe(late)
    sends.gather(late, "heard", recorded)
    assert heard.next() == (late, ["heard"])
    heard.unsubscribe(late)
    step("gone")
    step("nobody again")
    assert built == ["heard", "gone"]


def test_the_channels_known_heard_are_forgotten_past_their_bound(heard, monkeypatch):
    """A stream that ended leaves its trace's channel known as heard until it is published to
    again: past HEARD of them, all are forgotten, and each is asked about again."""
    monkeypatch.setattr(background, "HEARD", 1)
    known = []
    monkeypatch.setattr(background._Heard, "_send", spying(background._Heard._send, known))
    sends = Publisher("test-gather-bound")
    first, second = heard("first", "second")
    for round in range(2):
        for channel in (first, second):
            sends.gather(channel, round, encode)
            assert heard.next() == (channel, [round])
    assert max(map(len, known)) <= 1


def spying(send, known):
    def recorded(self, gathered, asked):
        replies = send(self, gathered, asked)
        known.append(set(self.channels))
        return replies

    return recorded


def test_a_message_that_fails_to_encode_loses_only_itself(heard, caplog):
    sends = Publisher("test-gather-encoding")
    held, broken, fine = heard("held", "broken", "fine")

    def refuse(items):
        raise TypeError("not serialisable")

    gate = busy(sends, held)
    sends.gather(broken, object(), refuse)
    sends.gather(fine, "next", encode)
    gate.set()
    assert [heard.next() for _ in range(2)] == [(held, ["hold"]), (fine, ["next"])]
    assert f"{broken} not encoded: TypeError: not serialisable" in caplog.text


def test_an_unreachable_redis_is_logged_never_raised(settings, caplog):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # read by the thread when it starts
    sends = Publisher("test-gather-unreachable")
    sends.gather("test:background:unreachable", "lost", encode)  # returns: the caller is done
    for _ in range(50):
        if "1 publications lost: ConnectionError" in caplog.text:
            break
        time.sleep(0.1)
    assert "1 publications lost: ConnectionError" in caplog.text


def test_a_forked_child_publishes_from_a_thread_of_its_own(heard):
    """Celery's prefork children: the parent's thread is not theirs, nor its queue, nor its lock
    (held at the fork by another thread, as the parent's publishing thread may hold it)."""
    sends = Publisher("test-gather-fork")
    parent, child = heard("parent", "child")
    sends.gather(parent, "before the fork", encode)
    assert heard.next() == (parent, ["before the fork"])
    holding, release = threading.Event(), threading.Event()

    def hold():
        with sends._queued:
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(5)
    pid = os.fork()
    if pid != 0:
        release.set()
        holder.join()
    if pid == 0:  # the child: publish, give the thread time to send, and leave without cleanup
        signal.alarm(5)  # a child stuck on the copied lock ends, and its test fails
        status = 1
        try:
            sends.gather(child, "from the child", encode)
            time.sleep(1)
            status = 0
        finally:
            os._exit(status)
    assert heard.next() == (child, ["from the child"])
    assert os.waitpid(pid, 0)[1] == 0


def test_a_stalled_redis_holds_the_thread_for_the_timeout_only(settings, monkeypatch, caplog):
    """A Redis that takes the connection and never answers: the publications are lost after the
    timeout, logged, and the thread goes on to what was queued meanwhile."""
    stalled = socket.create_server(("127.0.0.1", 0))  # accepts (the backlog), answers nothing
    monkeypatch.setattr(background, "TIMEOUT", 0.5)
    settings.REDIS_URL = f"redis://127.0.0.1:{stalled.getsockname()[1]}/0"
    sends = Publisher("test-gather-stalled")

    def lost():
        return caplog.text.count("1 publications lost: TimeoutError")

    try:
        began = time.monotonic()
        sends.gather("test:background:stalled", "first", encode)
        deadline = began + 10
        while not lost() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lost() == 1
        assert time.monotonic() - began < 3  # the host's timeout, not redis-py's default (5 s)
        sends.gather("test:background:stalled", "next", encode)  # the thread is not stuck
        while lost() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lost() == 2
    finally:
        stalled.close()
