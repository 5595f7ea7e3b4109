"""Where links to a held call come from, and which process serves its loopback page
(docs/design.md, "Links, loopback pages and the command line").

- **The host's origin.** `runhost` knows the address it serves (its `--port`) and publishes it,
  when it starts, in `MCPLET_HOST_FILE` (`var/host.json`), which every process of the
  installation reads: a command run from another shell, with another environment, still links
  to the running host. A process that serves the host's pages uses its own `PASSKEY_ORIGIN`;
  any other process the running host's published origin, or its own `PASSKEY_ORIGIN` when no
  host runs. `ceremony_url` builds every link to a ceremony page: commands, e-mail, logs.
- **Loopback pages** (localhost mode) are served by the process that serves the host's pages
  only (`runhost`; the web process when the host runs as separate processes), since it lives
  as long as the host does. Another process — a command, a separate worker — never starts one:
  it links to the host's page, which leads on to the live loopback page or starts it.
"""

import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings

logger = logging.getLogger(__name__)

_serving_pages = False


def serve_pages_here():
    """This process serves the host's pages (the web process, runhost): it serves loopback
    pages too."""
    global _serving_pages
    _serving_pages = True


def serves_pages():
    return _serving_pages


def publish(origin, address):
    """`runhost`, at start: the origin its pages are reached at (links name it) and the address
    it listens on (`address`, where a command on this machine hands it a call), with this
    process's id, for every process of the installation. Written whole or not at all."""
    serve_pages_here()
    path = Path(settings.MCPLET_HOST_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "origin": origin.rstrip("/"),
        "address": address.rstrip("/"),
        "pid": os.getpid(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(record) + "\n", encoding="utf-8")
    os.replace(partial, path)
    return record


def running_host():
    """The published host, if its process still runs on this machine: {"origin", "address",
    "pid", "started"}, or None (never published, unreadable, or its process ended)."""
    try:
        record = json.loads(Path(settings.MCPLET_HOST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    origin, address, pid = record.get("origin"), record.get("address"), record.get("pid")
    if not (isinstance(origin, str) and origin.startswith(("http://", "https://"))):
        return None
    if not (isinstance(address, str) and address.startswith("http://")):
        return None
    if type(pid) is not int or pid <= 0 or not _alive(pid):  # (True is an int too)
        return None
    return record


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: it exists
    except OSError:
        return False
    return True


def origin():
    """The origin every link to the host's pages names (no trailing slash)."""
    if not _serving_pages and (host := running_host()) is not None:
        return host["origin"]
    return settings.PASSKEY_ORIGIN.rstrip("/")


def ceremony_url(ceremony):
    """The one link to a ceremony's page on the host, whichever process builds it."""
    return origin() + ceremony.get_absolute_url()


def describe(ceremony):
    """What waits, in a person's words (its kind's: held/kinds/)."""
    return ceremony.rules.describe(ceremony)


def next_step(ceremony):
    """What the person does on the page, as an imperative (its kind's: held/kinds/)."""
    return ceremony.rules.next_step
