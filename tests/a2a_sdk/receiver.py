"""A partner's push-notification webhook, run by the tests in the a2a-sdk's virtualenv
(tests/a2a_sdk/sdk.py): `python -I receiver.py PORT AUTHORIZATION TOKEN FAILURES`. Each POST
is read with the SDK's own StreamResponse; it is taken (200) only with `Authorization:
AUTHORIZATION` and the notification token TOKEN (X-A2A-Notification-Token, as the SDK's
sender puts it), else 401; the first FAILURES POSTs that would be taken get 503 instead.
GET /received gives every POST seen, in order: {"status", "event" | "error", "headers"}."""

import sys

import uvicorn
from a2a.types.a2a_pb2 import StreamResponse
from google.protobuf.json_format import MessageToDict, ParseDict
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

PORT, AUTHORIZATION, TOKEN, FAILURES = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
received = []


async def webhook(request):
    headers = {
        name: request.headers.get(name, "")
        for name in ("authorization", "x-a2a-notification-token", "content-type", "host")
    }
    seen = {"headers": headers}
    try:
        seen["event"] = MessageToDict(ParseDict(await request.json(), StreamResponse()))
    except Exception as exc:  # what the SDK cannot read is the finding
        seen["error"] = f"{type(exc).__name__}: {exc}"
    credentials = (headers["authorization"], headers["x-a2a-notification-token"])
    taken = [r for r in received if r["status"] in (200, 503)]
    if "error" in seen:
        seen["status"] = 400
    elif credentials != (AUTHORIZATION, TOKEN):
        seen["status"] = 401
    else:
        seen["status"] = 503 if len(taken) < FAILURES else 200
    received.append(seen)
    return JSONResponse({}, status_code=seen["status"])


async def listing(request):
    return JSONResponse(received)


app = Starlette(routes=[Route("/hook", webhook, methods=["POST"]), Route("/received", listing)])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(PORT), log_level="warning")
