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
