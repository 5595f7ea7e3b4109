"""The partner endpoint's requests run in this process (Django's test client, no HTTP): the SQL
each kind of request makes, and a CPU profile of each (bench/a2a_endpoint.py). A kind is
(name, method, path, headers, body factory), as `a2a_endpoint.kinds` builds them."""

import cProfile
import time
from collections import Counter

from bench import common


def client():
    from django.test import Client

    return Client(SERVER_NAME="127.0.0.1")


def request(browser, spec):
    _, method, path, headers, body = spec
    extra = {"headers": {k: v for k, v in headers.items() if k != "Content-Type"}}
    if method == "GET":
        return browser.get(path, **extra)
    return browser.post(path, data=body(), content_type="application/json", **extra)


def queries(specs, names):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    browser, captured = client(), {}
    for name in names:
        request(browser, specs[name])  # warm
        with CaptureQueriesContext(connection) as statements:
            response = request(browser, specs[name])
        captured[name] = (response.status_code, [q["sql"] for q in statements.captured_queries])
    return captured


def profile(specs, names, n, top):
    browser = client()
    for name in names:
        for _ in range(20):
            request(browser, specs[name])
        profiler = cProfile.Profile(time.process_time)  # CPU: waits on the database are not hot
        start = time.perf_counter()
        profiler.enable()
        for _ in range(n):
            request(browser, specs[name])
        profiler.disable()
        per = (time.perf_counter() - start) / n * 1000
        title = f"cProfile, {name}, {n} in-process requests ({per:.2f} ms each under the profiler)"
        common.print_profile(profiler, title, top)


def print_queries(captured):
    print("\nSQL per request, in process (Django test client, one request after a warm one):")
    for name, (status, statements) in captured.items():
        kinds_count = Counter(sql.split(None, 1)[0].upper() for sql in statements)
        summary = ", ".join(f"{k} {v}" for k, v in sorted(kinds_count.items()))
        print(f"\n  {name} ({status}): {len(statements)} statements ({summary})")
        for sql in statements:
            text = " ".join(sql.split())
            print(f"    {text[:120]}{'…' if len(text) > 120 else ''}")
