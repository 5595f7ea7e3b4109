"""The singleton lock outlives its timeout while its holder works: the heartbeat extends it."""

import multiprocessing
import time

import pytest

from mcplet_host.locks import singleton


@pytest.mark.parametrize(
    "redis",
    [pytest.param(True, id="redis", marks=pytest.mark.services), pytest.param(False, id="file")],
)
def test_a_held_lock_is_extended_past_its_timeout(redis, settings):
    settings.EMBEDDED = not redis
    with singleton("test-heartbeat", 1) as held:
        assert held
        time.sleep(2.5)  # two and a half timeouts: only the heartbeat keeps it
        with singleton("test-heartbeat", 1) as second:
            assert not second
    with singleton("test-heartbeat", 1) as again:  # released at the end
        assert again


def _second_process(name, go, results):
    go.wait(10)
    with singleton(name, 30) as held:
        results.put(held)


def test_the_embedded_lock_holds_across_processes(settings):
    """The embedded mode's lock is held for every process of the host's database: a
    `manage.py run_director` beside `make run` must not run a second cycle at once. (The
    other process starts first: it shares nothing of this one's memory taken after.)"""
    settings.EMBEDDED = True
    context = multiprocessing.get_context("fork")
    results, go = context.Queue(), context.Event()
    other = context.Process(target=_second_process, args=("test-processes", go, results))
    other.start()
    with singleton("test-processes", 30) as held:
        assert held
        go.set()
        assert results.get(timeout=10) is False
    other.join(10)
    go.clear()
    other = context.Process(target=_second_process, args=("test-processes", go, results))
    other.start()
    go.set()
    assert results.get(timeout=10) is True  # released: the next one takes it
    other.join(10)
