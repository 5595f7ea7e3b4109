"""Settings of the host processes a dashboard browser test starts (daphne, a Celery worker): the
project's, with the passkey pages routed, and — on a Redis shared with other test runs — a queue,
channel-layer prefix and cache prefix of their own, so no run takes another's tasks or events."""

import os

from mcplet_host.settings import *  # noqa: F403
from mcplet_host.settings import CACHES, CHANNEL_LAYERS, EMBEDDED

ROOT_URLCONF = "tests.dashboard.urls"

_namespace = os.environ.get("MCPLET_TEST_NAMESPACE", "")
if _namespace and not EMBEDDED:
    CELERY_TASK_DEFAULT_QUEUE = _namespace
    CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = f"mcplet:channels:{_namespace}"
    CACHES["default"]["KEY_PREFIX"] = f"mcplet:{_namespace}"

# redis-py 8 reads with a 5 s socket timeout, no longer than channels-redis's blocking receive,
# so every idle consumer dies every ~5 s (django/channels_redis#422). Until the project's
# settings give the layer longer reads (test_live.py::test_a_quiet_socket_stays_open checks
# that), the processes of these tests do.
if not EMBEDDED:
    CHANNEL_LAYERS["default"]["CONFIG"]["hosts"] = [
        {"address": host, "socket_timeout": 15} if isinstance(host, str) else host
        for host in CHANNEL_LAYERS["default"]["CONFIG"]["hosts"]
    ]
