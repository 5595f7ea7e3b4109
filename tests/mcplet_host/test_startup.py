"""Commands start quickly: Django's start-up (every model, admin module and URL, as
`manage.py check` loads them) leaves the heavy libraries to the code that uses them. Timings
are in bench/startup.py; this checks what is imported, which does not depend on the machine."""

import os
import subprocess
import sys

from tests.processes import ROOT

HEAVY = (
    "litellm",
    "mcp",
    "mcp_types",
    "httpx2",
    "mcplets.registration",
    "twisted",
    "redis.asyncio",
)
PROBE = f"""
import sys
import django
django.setup()
from django.core.management import call_command
call_command("check", verbosity=0)
print("loaded:", *[name for name in {HEAVY!r} if name in sys.modules])
"""


def run_python(code):
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "mcplet_host.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_check_imports_no_llm_or_mcp_library():
    assert run_python(PROBE).splitlines()[-1] == "loaded:"


def test_a_worker_loads_what_the_first_llm_call_would():
    """What a worker runs as it starts (mcplet_host.celery): litellm, its tokenizer and the
    scripted provider loaded, in a process that has not called a model yet."""
    run_python(
        "import sys, django; django.setup()\n"
        "from agents import llm\n"
        "assert 'litellm' not in sys.modules\n"
        "llm.load()\n"
        "import litellm\n"
        "from agents.scripted import PROVIDER\n"
        "assert PROVIDER in [p['provider'] for p in litellm.custom_provider_map]\n"
        "assert 'encoding' in vars(sys.modules['litellm.main'])\n"
    )


# Records each collection's generation and whether Django's apps were ready when it began.
COUNTED = """
import gc, sys
from django.apps import apps
passes = []
gc.callbacks.append(lambda phase, info: phase == "start" and passes.append(
    (info["generation"], apps.ready)))
"""


def test_manage_py_loads_django_with_no_full_collection():
    """`manage.py` starts with the collector off, and turns it on once the apps are loaded,
    with what they loaded frozen (mcplet_host.startup): no full pass walks it meanwhile."""
    out = run_python(
        COUNTED + "import runpy\n"
        "sys.argv = ['manage.py', 'check']\n"
        "runpy.run_path('manage.py', run_name='__main__')\n"
        "print(gc.isenabled(), gc.get_freeze_count(), *[g for g, ready in passes if not ready])\n"
    )
    enabled, frozen, *before_ready = out.splitlines()[-1].split()
    assert enabled == "True"
    assert int(frozen) > 50_000  # Django, DRF, Celery and the host's apps
    assert "2" not in before_ready  # the generations of the passes before the apps were ready


def test_a_large_load_is_frozen_and_its_garbage_collected():
    """`startup.loading()`: no collection during it; afterwards what it loaded is frozen,
    what became garbage meanwhile is gone, and the collector is as it was."""
    out = run_python(
        "import django; django.setup()\n" + COUNTED + "import weakref\n"
        "from mcplet_host import startup\n"
        "class Node: pass\n"
        "frozen = gc.get_freeze_count()\n"
        "with startup.loading():\n"
        "    during = gc.isenabled()\n"
        "    kept = [Node() for _ in range(50_000)]\n"
        "    cycle = Node(); cycle.self = cycle; gone = weakref.ref(cycle); del cycle\n"
        "    collections = len(passes)\n"
        "print(during, collections, gc.get_freeze_count() - frozen >= 50_000, gone() is None,"
        " gc.isenabled())\n"
        "gc.disable()\n"
        "with startup.loading():\n"
        "    pass\n"
        "print(gc.isenabled())\n"
    )
    assert out.splitlines()[-2:] == ["False 0 True True True", "False"]


def test_the_web_module_imported_once_django_is_set_up_leaves_the_collector_on():
    out = run_python(
        "import gc, django; django.setup()\nimport mcplet_host.asgi\nprint(gc.isenabled())\n"
    )
    assert out.splitlines()[-1] == "True"
