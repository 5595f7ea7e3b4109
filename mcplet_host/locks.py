"""Singleton locks with expiry and a heartbeat, for work that must never overlap across
workers (a Director's cycle). Redis (redis-py's Lock) when REDIS_URL is set; in the embedded
mode — one process — the local cache's atomic add."""

import secrets
import threading
from contextlib import contextmanager, suppress

import redis
from django.conf import settings
from django.core.cache import cache
from redis.exceptions import LockError


class _RedisLock:
    def __init__(self, name, timeout):
        client = redis.Redis.from_url(settings.REDIS_URL)
        # Not thread-local: the heartbeat extends from a thread of its own the lock this one took.
        self._lock = client.lock(
            f"mcplet:lock:{name}", timeout=timeout, blocking=False, thread_local=False
        )
        self.timeout = timeout

    def acquire(self):
        return self._lock.acquire()

    def extend(self):
        self._lock.extend(self.timeout, replace_ttl=True)

    def release(self):
        with suppress(LockError):  # expired (a heartbeat was missed), maybe taken by another
            self._lock.release()


class _CacheLock:
    def __init__(self, name, timeout):
        self.key, self.timeout, self.token = f"lock:{name}", timeout, secrets.token_hex(8)

    def acquire(self):
        return cache.add(self.key, self.token, self.timeout)

    def extend(self):
        if cache.get(self.key) == self.token:
            cache.touch(self.key, self.timeout)

    def release(self):
        if cache.get(self.key) == self.token:
            cache.delete(self.key)


def make_lock(name, timeout):
    return (_CacheLock if settings.EMBEDDED else _RedisLock)(name, timeout)


@contextmanager
def singleton(name, timeout):
    """Yield True while holding the lock (extended every timeout/3), False if someone else
    holds it. A process that dies stops the heartbeat; the lock expires after `timeout`."""
    lock = make_lock(name, timeout)
    if not lock.acquire():
        yield False
        return
    stop = threading.Event()

    def heartbeat():
        while not stop.wait(timeout / 3):
            lock.extend()

    beat = threading.Thread(target=heartbeat, name=f"lock-heartbeat:{name}", daemon=True)
    beat.start()
    try:
        yield True
    finally:
        stop.set()
        beat.join()
        lock.release()
