"""The Redis cache keeps one client per connection pool, and does what Django's does."""

import threading
import uuid

import pytest
from django.core.cache import cache

pytestmark = pytest.mark.services


def test_one_client_serves_every_command():
    client = cache._cache.get_client()
    assert cache._cache.get_client(write=True) is client
    key = f"test-cache-{uuid.uuid4().hex}"
    assert cache.add(key, 0, 30) and not cache.add(key, 5, 30)
    assert [cache.incr(key) for _ in range(3)] == [1, 2, 3]
    assert cache.get(key) == 3 and cache.get_many([key, "absent"]) == {key: 3}
    cache.delete(key)
    assert cache.get(key, "gone") == "gone"


def test_threads_share_it_safely():
    key = f"test-cache-{uuid.uuid4().hex}"
    cache.add(key, 0, 30)

    def bump():
        for _ in range(200):
            cache.incr(key)

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.get(key) == 800


def test_every_thread_shares_the_process_pool():
    """Django makes a cache object per thread (a request's sync code runs on a thread of its
    own under ASGI): they share one pool, so a request opens no connection of its own."""
    from django.core.cache import caches

    seen = []

    def look():
        seen.append(caches["default"]._cache.get_client())
        caches["default"].get("anything")

    threads = [threading.Thread(target=look) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(client) for client in seen}) == 1
    assert seen[0] is cache._cache.get_client()
