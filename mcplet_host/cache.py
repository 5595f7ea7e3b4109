"""Django's Redis cache, with one `redis.Redis` per connection pool instead of one per command.

Django's client builds a new `redis.Redis` for every command, and redis-py 8 sets up its
response callbacks for each (≈ 65 µs): a few per tool call (the pool's rate limit) and per
partner request (the throttle). redis-py's clients are thread-safe and share their pool, which
also takes care of a fork."""

from django.core.cache.backends import redis


class RedisCacheClient(redis.RedisCacheClient):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._clients = {}

    def get_client(self, key=None, *, write=False):
        pool = self._get_connection_pool(write)
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients[id(pool)] = self._client(connection_pool=pool)
        return client


class RedisCache(redis.RedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = RedisCacheClient
