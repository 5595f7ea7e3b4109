"""Singleton locks with expiry and a heartbeat, for work that must never overlap across
workers (a Director's cycle). Redis (redis-py's Lock) when REDIS_URL is set; in the embedded
mode — one machine, its host and any `manage.py` command beside it — a file lock."""

import fcntl
import hashlib
import threading
from contextlib import contextmanager, suppress

import redis
from django.conf import settings
from django.db import connection
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


class _FileLock:
    """An exclusive lock on a file of the database's (its processes share it, wherever they
    run from): the kernel drops it with the process that held it, so it needs no expiry. The
    local cache's add it replaces was one process's: `run_director` beside `make run` ran a
    second cycle of the same Director."""

    def __init__(self, name, _timeout):
        key = hashlib.sha256(f"{connection.settings_dict['NAME']}:{name}".encode()).hexdigest()
        self.path, self.file = settings.VAR_DIR / "locks" / f"{key[:32]}.lock", None

    def acquire(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = self.path.open("a")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.close()
            return False
        return True

    def extend(self):
        pass

    def release(self):
        self.file.close()  # closing the file drops its lock


def make_lock(name, timeout):
    return (_FileLock if settings.EMBEDDED else _RedisLock)(name, timeout)


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
