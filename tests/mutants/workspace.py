"""What the two mutation scripts share: a copy of the working tree to break (never the checkout
itself), and an environment whose test database is their own."""

import os
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "var", "__pycache__", ".pytest_cache", ".ruff_cache", "*.egg-info"
)


def copy_tree(dest):
    """A fresh copy of the working tree (uncommitted changes included) at `dest`."""
    dest = Path(dest)
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(ROOT, dest, ignore=IGNORE)
    return dest


def environment(tree, database_suffix):
    """The tests' environment for `tree`, with a PostgreSQL database name of its own (pytest
    creates and drops `test_<name>`: a run here must not drop a developer's test database)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "CI": os.environ.get("CI", "true")}
    url = env.get("DATABASE_URL", "")
    if url.startswith("postgres"):
        env["DATABASE_URL"] = re.sub(r"/([^/?]+)(\?|$)", rf"/\1_{database_suffix}\2", url, count=1)
    return env
