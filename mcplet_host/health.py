"""Probes behind /healthz: each returns None when the part is up, or a short reason."""

import uuid

from django.core.cache import cache
from django.db import connection

from mcplet_host.celery import app


def check_database():
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def check_broker():
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def check_cache():
    key = f"healthz:{uuid.uuid4().hex}"
    try:
        cache.set(key, "ok", 5)
        ok = cache.get(key) == "ok"
        cache.delete(key)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None if ok else "a value written to the cache could not be read back"


CHECKS = {"database": check_database, "broker": check_broker, "cache": check_cache}
