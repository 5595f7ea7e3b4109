"""Sliding-window rate limits in the cache: Redis shared by every process, or in-process when
embedded. A window's count is an atomic counter, so concurrent processes never lose a count,
and each call costs the same few small commands whatever the limit (DRF's own throttle reads
and rewrites the whole list of recent timestamps)."""

import math
import time

from django.core.cache import cache


def _key(name, window):
    return f"ratelimit:{name}:{window}"


def take(name, limit, period, now=None):
    """Count one call under `name` against `limit` per `period` seconds: None if allowed, else
    the milliseconds to wait. The count is this window's plus the previous window's, weighted by
    how much of it the sliding window still overlaps; a refused call is not counted."""
    now = time.time() if now is None else now
    window, elapsed = divmod(now, period)
    window = int(window)
    key = _key(name, window)
    count, previous = _count(key, _key(name, window - 1), math.ceil(period * 2.5))
    weighted = previous * (period - elapsed) / period + count
    if weighted <= limit:
        return None
    cache.decr(key)
    wait = period - elapsed  # the next window drops this one's weight for good
    if previous:
        wait = min(wait, period * (weighted - limit) / previous)
    return max(1, math.ceil(wait * 1000))


def _count(key, previous, timeout):
    if hasattr(cache, "count"):  # Redis (mcplet_host.cache): one round trip
        return cache.count(key, previous, timeout)
    try:
        count = cache.incr(key)
    except ValueError:  # the window's first call (or its key was evicted)
        cache.add(key, 0, timeout)
        count = cache.incr(key)
    return count, cache.get(previous, 0)


def forget(name, period, now=None):
    """Start `name` afresh (its current and previous windows)."""
    window = int((time.time() if now is None else now) // period)
    cache.delete_many([_key(name, window), _key(name, window - 1)])
