"""The process's loop for sends after a commit (mcplet_host.background): sends of one kind
queued while the loop is busy go out together, in order; an idle loop sends each at once."""

import asyncio
import threading

from mcplet_host.background import Background


def settle(sends):
    """Wait until everything submitted so far has been awaited."""
    done = threading.Event()

    async def mark():
        done.set()

    sends.submit(mark, "mark")
    assert done.wait(5)


def busy(sends):
    """Hold the loop until the returned event is set."""
    gate = threading.Event()

    async def hold():
        await asyncio.get_running_loop().run_in_executor(None, gate.wait, 5)

    sends.submit(hold, "hold")
    return gate


def test_what_is_queued_while_the_loop_is_busy_goes_in_one_send_per_kind():
    sends, got = Background("test-gather"), []

    async def send(items):
        got.append(list(items))

    gate = busy(sends)
    for i in range(5):
        sends.gather("audit", i, send, "audit")
        if i == 2:
            sends.gather("trace", "t", send, "trace")
    gate.set()
    settle(sends)
    assert got == [[0, 1, 2, 3, 4], ["t"]]

    sends.gather("audit", 5, send, "audit")  # an idle loop: each goes alone
    settle(sends)
    sends.gather("audit", 6, send, "audit")
    settle(sends)
    assert got[2:] == [[5], [6]]


def test_a_failed_send_loses_its_batch_only(caplog):
    sends, got = Background("test-gather-failure"), []

    async def send(items):
        if items == ["broken"]:
            raise ConnectionError("redis is down")
        got.append(list(items))

    sends.gather("audit", "broken", send, "the audit broadcast")
    settle(sends)
    sends.gather("audit", "next", send, "the audit broadcast")
    settle(sends)
    assert got == [["next"]]
    assert "the audit broadcast failed: ConnectionError: redis is down" in caplog.text


def test_the_kinds_gathered_while_the_loop_is_busy_wake_it_once():
    woken = []

    class Counted(Background):
        def submit(self, send, what):
            woken.append(what)
            super().submit(send, what)

    sends, got = Counted("test-gather-wakes"), []

    async def send(items):
        got.append(list(items))

    gate = busy(sends)
    for kind, item in (("audit", 1), ("trace", "t"), ("audit", 2), ("run", "r")):
        sends.gather(kind, item, send, kind)
    gate.set()
    settle(sends)
    assert got == [[1, 2], ["t"], ["r"]]
    assert woken == ["hold", "gathered sends", "mark"]
