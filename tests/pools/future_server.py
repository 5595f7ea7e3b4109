"""An MCP server of a revision the host does not speak (stdio, JSON lines): every request is
answered -32022 UNSUPPORTED_PROTOCOL_VERSION naming its only version, as the 2026-07-28 spec
has a server answer a version it does not speak.

    python -m tests.pools.future_server
"""

import json
import sys

SUPPORTED = ["2099-01-01"]

for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue  # a notification: nothing to answer
    error = {
        "code": -32022,
        "message": "Unsupported protocol version",
        "data": {"supported": SUPPORTED, "requested": "?"},
    }
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}), flush=True)
