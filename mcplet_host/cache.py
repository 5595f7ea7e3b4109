"""Django's Redis cache, with its connection pools and clients kept per process.

Django makes a cache object per thread, each with its own connection pools, and builds a new
`redis.Redis` for every command. Under ASGI every request's sync code runs on a thread of its
own, so each request opened a new Redis connection, and each command set a client up (≈ 65 µs
in redis-py 8). Here the pools and their clients belong to the process: redis-py's pools and
clients are thread-safe, and a pool starts afresh after a fork."""

import threading

from django.core.cache.backends import redis

_pools, _clients = {}, {}
_lock = threading.Lock()


class RedisCacheClient(redis.RedisCacheClient):
    def _get_connection_pool(self, write):
        index = self._get_connection_pool_index(write)
        key = (self._servers[index], repr(sorted(self._pool_options.items())))
        with _lock:
            if key not in _pools:
                _pools[key] = self._pool_class.from_url(self._servers[index], **self._pool_options)
            return _pools[key]

    def get_client(self, key=None, *, write=False):
        pool = self._get_connection_pool(write)
        client = _clients.get(id(pool))
        if client is None:
            client = _clients.setdefault(id(pool), self._client(connection_pool=pool))
        return client


class RedisCache(redis.RedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = RedisCacheClient

    def count(self, key, other, timeout):
        """One more call in the counter `key` (created with `timeout` seconds to live), and the
        counter `other`: (key's count, other's count), in one round trip (mcplet_host.ratelimit;
        Django's own incr asks EXISTS first, then INCRBY)."""
        key, other = self.make_and_validate_key(key), self.make_and_validate_key(other)
        pipeline = self._cache.get_client(key, write=True).pipeline(transaction=False)
        pipeline.set(key, 0, ex=timeout, nx=True)
        pipeline.incr(key)
        pipeline.get(other)
        _, count, previous = pipeline.execute()
        return count, int(previous or 0)
