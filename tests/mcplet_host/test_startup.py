"""Commands start quickly: Django's start-up (every model, admin module and URL, as
`manage.py check` loads them) leaves the heavy libraries to the code that uses them. Timings
are in bench/startup.py; this checks what is imported, which does not depend on the machine."""

import os
import subprocess
import sys

from tests.processes import ROOT

HEAVY = ("litellm", "mcp", "mcp_types", "httpx2", "mcplets.registration", "twisted")
PROBE = f"""
import sys
import django
django.setup()
from django.core.management import call_command
call_command("check", verbosity=0)
print("loaded:", *[name for name in {HEAVY!r} if name in sys.modules])
"""


def test_check_imports_no_llm_or_mcp_library():
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "mcplet_host.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "loaded:"
