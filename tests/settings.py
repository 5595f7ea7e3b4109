"""The tests' settings, and those of the host processes a test starts (daphne, a Celery worker):
the project's, with

- under pytest-xdist, a Redis database per worker (gw0 → the given one, gw1 → the one below):
  every test flushes its Redis database, which must not drop another worker's keys and tasks;
- for a test's host processes, on a Redis shared with other tests, a queue, channel-layer
  prefix and cache prefix of their own, so no run takes another's tasks or events."""

import os
import re

_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
# Once per worker: its child processes inherit both the moved REDIS_URL and the mark.
if (
    _worker.startswith("gw")
    and os.environ.get("REDIS_URL")
    and _worker != os.environ.get("MCPLET_TEST_REDIS_WORKER")
):
    _url = os.environ["REDIS_URL"]
    _db = int(m.group(1)) if (m := re.search(r"/(\d+)$", _url)) else 0
    _base = _url[: m.start()] if m else _url.rstrip("/")
    os.environ["REDIS_URL"] = f"{_base}/{(_db - int(_worker[2:])) % 16}"
    os.environ["MCPLET_TEST_REDIS_WORKER"] = _worker

from mcplet_host.settings import *  # noqa: E402, F403
from mcplet_host.settings import CACHES, CHANNEL_LAYERS, EMBEDDED, VAR_DIR  # noqa: E402

# Not the host a developer runs from this checkout (`make run`): a test's host publishes its
# origin in a var directory of the test's own (MCPLET_VAR_DIR), or in this file.
MCPLET_HOST_FILE = VAR_DIR / "host-tests.json"

_namespace = os.environ.get("MCPLET_TEST_NAMESPACE", "")
if _namespace and not EMBEDDED:
    CELERY_TASK_DEFAULT_QUEUE = _namespace
    CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = f"mcplet:channels:{_namespace}"
    CACHES["default"]["KEY_PREFIX"] = f"mcplet:{_namespace}"
