"""Settings of the host processes a test starts (daphne, a Celery worker): the project's, and —
on a Redis shared with other test runs — a queue, channel-layer prefix and cache prefix of
their own, so no run takes another's tasks or events."""

import os

from mcplet_host.settings import *  # noqa: F403
from mcplet_host.settings import CACHES, CHANNEL_LAYERS, EMBEDDED

_namespace = os.environ.get("MCPLET_TEST_NAMESPACE", "")
if _namespace and not EMBEDDED:
    CELERY_TASK_DEFAULT_QUEUE = _namespace
    CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = f"mcplet:channels:{_namespace}"
    CACHES["default"]["KEY_PREFIX"] = f"mcplet:{_namespace}"
