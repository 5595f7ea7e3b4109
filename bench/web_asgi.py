"""The host's ASGI application as the benchmarks serve it: `mcplet_host.asgi:application`,
after what the benchmark's environment asks, applied at import — so in each process of a server
with several (uvicorn's workers load the application by this import string):

- MCPLET_BENCH_A2A_QUEUE: the Celery app's default queue (the benchmark's private queue);
- MCPLET_BENCH_A2A_CONN_MAX_AGE: CONN_MAX_AGE in seconds ("settings", or unset: the settings');
- MCPLET_BENCH_A2A_BROADCAST=off: the dashboard's broadcast of each audit event disconnected;
- MCPLET_BENCH_A2A_PROFILE=<path>: cProfile (CPU time) of every thread of the process, written to
  `<path>.<pid>` when it exits.
"""

import atexit
import cProfile
import os
import pstats
import signal
import threading
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcplet_host.settings")

from mcplet_host.asgi import application  # noqa: E402 (sets Django up)

__all__ = ["application"]


def _apply():
    from mcplet_host.celery import app

    if queue := os.environ.get("MCPLET_BENCH_A2A_QUEUE"):
        app.conf.task_default_queue = queue
    if (age := os.environ.get("MCPLET_BENCH_A2A_CONN_MAX_AGE", "settings")) != "settings":
        from django.db import connections

        connections.settings["default"]["CONN_MAX_AGE"] = int(age)
    if os.environ.get("MCPLET_BENCH_A2A_BROADCAST") == "off":
        from mcplet_host.signals import audit_recorded

        audit_recorded.disconnect(dispatch_uid="dashboard.audit")
    if path := os.environ.get("MCPLET_BENCH_A2A_PROFILE"):
        _profile_all_threads(f"{path}.{os.getpid()}")


def _profile_all_threads(path):
    """cProfile this (main) thread from now and every thread started later (each request's
    sync code runs on a request thread, which the handler keeps for later requests), merged into
    one stats file at exit — the threads still running with what they recorded so far: atexit
    for a process that exits normally (daphne), and on SIGTERM before uvicorn's own handler."""
    lock, merged, original_run = threading.Lock(), [], threading.Thread.run
    running = set()  # the profilers of threads still running (the kept request threads)

    def add(profiler):
        with lock:
            if merged:
                merged[0].add(profiler)
            else:
                merged.append(pstats.Stats(profiler))

    def run(thread):
        profiler = cProfile.Profile(time.thread_time)
        with lock:
            running.add(profiler)
        profiler.enable()
        try:
            original_run(thread)
        finally:
            profiler.disable()
            with lock:
                running.discard(profiler)
            add(profiler)

    threading.Thread.run = run
    main = cProfile.Profile(time.thread_time)
    main.enable()
    done = []

    def dump():
        if done:
            return
        done.append(True)
        main.disable()
        add(main)
        with lock:
            still = list(running)
        for profiler in still:  # what each has recorded so far (the handler keeps its threads)
            add(profiler)
        merged[0].dump_stats(path)

    atexit.register(dump)
    # uvicorn stops gracefully on SIGTERM, then raises it again with the default handler: the
    # process ends without atexit or finalizers. Dump first, then let uvicorn's handler run.
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):
        dump()
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, on_term)


_apply()
