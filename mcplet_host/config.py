"""Typed access to the environment. Every error names the variable it is about."""

import functools
import os
from urllib.parse import parse_qs, urlparse

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

MISSING = object()


def _raw(name, default):
    value = os.environ.get(name)
    if value is None or value == "":
        if default is MISSING:
            raise ImproperlyConfigured(f"{name} is not set: set the environment variable {name}.")
        return default
    return value


def env_str(name, default=MISSING):
    return _raw(name, default)


def env_bool(name, default=False):
    value = _raw(name, default)
    if isinstance(value, bool):
        return value
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean: use true or false.")


def env_int(name, default=MISSING, minimum=None):
    value = _raw(name, default)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer.") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} must be at least {minimum}.")
    return number


def env_list(name, default=MISSING):
    value = _raw(name, default)
    if isinstance(value, list):
        return value
    return [item.strip() for item in value.split(",") if item.strip()]


def env_choice(name, choices, default=MISSING):
    value = _raw(name, default)
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of: {', '.join(choices)}.")
    return value


def env_url(name, schemes, default=MISSING):
    value = _raw(name, default)
    if value is None:
        return None
    parsed = urlparse(value)
    try:
        parsed.port  # noqa: B018 (raises on a port out of range or not a number)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not a valid URL: {exc}.") from None
    if parsed.scheme not in schemes or not (parsed.netloc or parsed.path):
        raise ImproperlyConfigured(
            f"{name}={value!r} is not a valid URL: expected a {' or '.join(schemes)} URL."
        )
    return value


def env_database(name, default):
    value = _raw(name, default)
    # Under ASGI every request runs in a thread of its own: persistent connections would pile
    # up one per thread, so they are opt-in (DB_CONN_MAX_AGE, e.g. for workers).
    max_age = env_int("DB_CONN_MAX_AGE", 0, minimum=0)
    # Or a pool per process (PostgreSQL): each thread borrows a connection for a request or a
    # task and gives it back, instead of connecting anew (`serve` turns it on for the web).
    pool_size = env_int("DB_POOL_MAX_SIZE", 0, minimum=0)
    try:
        config = dj_database_url.parse(value, conn_max_age=max_age, conn_health_checks=True)
    except (ValueError, KeyError) as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not a valid database URL: {exc}") from None
    if not config.get("ENGINE"):
        raise ImproperlyConfigured(f"{name}={value!r} is not a valid database URL.")
    if pool_size and config["ENGINE"].endswith("postgresql"):
        if max_age:
            raise ImproperlyConfigured(
                "DB_POOL_MAX_SIZE and DB_CONN_MAX_AGE are two ways to keep connections: set one."
            )
        # A thread waits for a free connection up to `timeout` seconds, then its request fails.
        config.setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": pool_size,
            "timeout": 10,
        }
    return config


@functools.cache  # every audited trace's announcement names its channel with it
def redis_db(url):
    """The database a redis:// URL names, as redis-py reads it (`?db=`, else the path, else 0),
    without importing redis-py (whose import loads its asyncio client: a slower start-up)."""
    parsed = urlparse(url)
    return parse_qs(parsed.query).get("db", [parsed.path.strip("/") or "0"])[0]
