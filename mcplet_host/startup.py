"""A process's start-up without the garbage collector's passes over what it loads.

Loading the host (Django and its apps, DRF, Celery; in a worker, the MCP SDK and the LLM client)
makes a few hundred thousand objects that live as long as the process. The cyclic collector
walked them again at each of its full passes while they were loaded: an eighth of `manage.py
check`'s CPU, and more than half a second of a worker's start. So `manage.py` and the web's ASGI
module call `begin()` before Django loads, and once it has (`settled()`, as the apps are ready)
what is loaded is frozen: moved out of every later collection, as the `gc` documentation
advises for a server, whose forked children then share it too. A Celery program sets Django up
itself (its Django fixup, before any signal of ours), so there only its large loads (a worker's
SDK and LLM client) run in `loading()`. What was garbage among the objects loaded is collected
before they are frozen, by one pass over the young objects only: everything made while the
collector was off is young."""

import gc
from contextlib import contextmanager

_began = False  # the collector is off because `begin()` turned it off


def begin():
    """At a process's entry point: no collection until its modules are loaded. Nothing once
    Django is set up (a module that calls this, imported later, changes nothing)."""
    global _began
    from django.apps import apps

    if not apps.ready and gc.isenabled():
        gc.disable()
        _began = True


def settled():
    """Django's apps are ready: what is loaded is kept out of later collections, and the
    collector runs again if `begin()` had stopped it."""
    global _began
    _freeze()
    if _began:
        _began = False
        gc.enable()


@contextmanager
def loading():
    """A large load after start-up (the LLM client, in a worker already serving): no
    collection during it, then what it loaded is frozen. Other threads' garbage made meanwhile
    is young too, so it is collected before the freeze, not kept."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        _freeze()
        if enabled:
            gc.enable()


def _freeze():
    gc.collect(0)
    gc.freeze()
