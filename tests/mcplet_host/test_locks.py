"""The singleton lock outlives its timeout while its holder works: the heartbeat extends it."""

import time

import pytest

from mcplet_host.locks import singleton


@pytest.mark.parametrize(
    "redis",
    [pytest.param(True, id="redis", marks=pytest.mark.services), pytest.param(False, id="cache")],
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
