"""`manage.py call_tool` hands its call to the running host, so that nothing the call leads to
depends on the command's short-lived process (docs/design.md, "Links, loopback pages and the
command line"): a held call's loopback page is the host's, and a wallet's
`notifications/elicitation/complete` for a step the call asked reaches the host's own MCP
session, which lives as long as the host.

- With REDIS_URL the call is a Celery task, run by the host's worker. The command waits
  CLAIM_WAIT seconds for a worker to claim it (a cache key: the first `add` wins); when none
  does, it claims the call back and runs it itself, and a worker that takes the task later
  runs nothing.
- In the embedded mode the command shares no broker with `runhost`: it posts the call to the
  address the running host published (passkey.links), signed with an HMAC keyed from
  SECRET_KEY (as the bus signs its messages), fresh (FRESH) and used once (its nonce). `receive`
  refuses anything else with a 4xx, audited. When no host runs — nothing published, or nothing
  listens at its address — the command runs the call itself.
"""

import hmac
import json
import math
import secrets
import time
import urllib.error
import urllib.request

from django.apps import apps
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from django.urls import reverse
from django.utils.crypto import salted_hmac
from django.views.decorators.csrf import csrf_exempt

from mcplet_host import audit, gateway, storable
from mcplet_host.celery import enqueue
from passkey import links

TASK = "mcplet_host.call_tool_handed_over"
SIGNATURE_HEADER = "X-Mcplet-Signature"
REFUSED_EVENT = "mcplet.handoff.refused"
FRESH = 60  # seconds a signed call may take to arrive (and clocks of one machine may differ)
CLAIM_WAIT = 10  # seconds a command waits for a worker to take its call
CLAIM_TTL = 24 * 3600
FIELDS = {"agent": 100, "tool": 200, "surface": 8, "trace": 64, "nonce": 64}


class HandOffFailed(Exception):
    """The host took the call, or may have, but its outcome did not come back."""


def call(agent_id, tool, arguments, surface="model", trace=""):
    """Hand one gateway call to the running host. Returns its outcome, {"status", "envelope",
    "ceremony" (a token or None)}, or None when no host runs: then the caller runs it."""
    body = {
        "agent": agent_id,
        "tool": tool,
        "arguments": arguments,
        "surface": surface,
        "trace": trace,
    }
    if not settings.EMBEDDED:
        return _through_a_worker(body)
    host = links.running_host()
    return None if host is None else _post(host["address"], body)


def run(body):
    """In the host: the call, through the gateway like any other (its checks, its audit)."""
    agent = apps.get_model("agents", "Agent").objects.filter(agent_id=body["agent"]).first()
    if agent is None:
        return {"status": "refused", "envelope": None, "error": f"No agent {body['agent']!r}."}
    outcome = gateway.call_tool(
        agent, body["tool"], body["arguments"], body["surface"], body["trace"]
    )
    ceremony = outcome.ceremony.token if outcome.ceremony is not None else None
    return {"status": outcome.status, "envelope": outcome.envelope, "ceremony": ceremony}


def run_wait():
    """The longest a handed-over call may take: its tries, their waits, a person's form."""
    tries = settings.MCPLET_TOOL_RETRIES + 1
    waits = settings.MCPLET_TOOL_RETRIES * settings.MCPLET_TOOL_RETRY_MAX_WAIT_MS / 1000
    return settings.MCPLET_TOOL_TIMEOUT * tries + waits + settings.MCPLET_ELICITATION_WAIT + 30


# --- with Redis: a task for the host's worker ----------------------------------------------------


def _through_a_worker(body):
    claim = f"mcplet:handoff:{secrets.token_hex(16)}"
    result = enqueue(TASK, [claim, body], expires=CLAIM_WAIT * 2)
    deadline = time.monotonic() + CLAIM_WAIT
    while cache.get(claim) != "host":
        if time.monotonic() >= deadline and cache.add(claim, "command", CLAIM_TTL):
            result.forget()
            return None  # no worker took it: it is this command's now, and runs here
        time.sleep(0.1)
    try:
        outcome = result.get(timeout=run_wait())
    except Exception as exc:  # the worker's error, or no answer in time
        raise HandOffFailed(
            f"the host's worker took the call but its outcome did not come back ({exc!r}): "
            "see the dashboard's audit log before calling again"
        ) from exc
    result.forget()
    return outcome


def take(claim, body):
    """The task's body: run the call, unless the command that sent it claimed it back."""
    if not cache.add(claim, "host", CLAIM_TTL):
        return {"status": "withdrawn", "envelope": None, "ceremony": None}
    return run(body)


# --- embedded: a signed request to the running host ---------------------------------------------


def sign(payload):
    return salted_hmac("mcplet.handoff", payload, algorithm="sha256").hexdigest()


def _post(address, body):
    body = {**body, "issued": time.time(), "nonce": secrets.token_urlsafe(24)}
    payload = json.dumps(body).encode()
    request = urllib.request.Request(  # noqa: S310 (running_host publishes http:// only)
        address + reverse("handoff"),
        data=payload,
        method="POST",
        headers={"Content-Type": "application/json", SIGNATURE_HEADER: sign(payload)},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # this machine's
    try:
        with opener.open(request, timeout=run_wait()) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        answer = exc.read().decode(errors="replace")[:500]
        raise HandOffFailed(
            f"the host at {address} refused the call ({exc.code}): {answer}"
        ) from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return None  # nothing listens there: the host stopped, and nothing was sent
        raise HandOffFailed(
            f"the host at {address} did not answer ({exc.reason}): the call may have reached "
            "it; see the dashboard's audit log before calling again"
        ) from exc
    except (OSError, ValueError) as exc:  # a timeout, a connection lost, an unreadable answer
        raise HandOffFailed(
            f"the host at {address} did not answer ({exc!r}): the call may have reached it; "
            "see the dashboard's audit log before calling again"
        ) from exc


@csrf_exempt
def receive(request):
    """`POST /host/calls/`: a command of this installation hands the running host a call (the
    embedded mode only). Only a signed, fresh, unused request is run; anything else is refused
    with a 4xx and audited, and runs nothing."""
    if not settings.EMBEDDED:  # with Redis commands queue their calls: nothing is posted here
        return _refuse(request, "not_embedded", "This host takes calls from its queue.", 404)
    if request.method != "POST":
        return _refuse(request, "method", "POST a signed call.", 405)
    try:
        raw = request.body
    except RequestDataTooBig:
        return _refuse(request, "too_large", "The call is too large.", 413)
    signature = request.headers.get(SIGNATURE_HEADER, "")
    if not signature:
        return _refuse(request, "unsigned", "Only a command of this host may hand it a call.", 401)
    if not hmac.compare_digest(signature.encode(errors="replace"), sign(raw).encode()):
        return _refuse(request, "bad_signature", "The call's signature does not verify.", 403)
    body = _parsed(raw)
    if body is None:
        return _refuse(request, "malformed", "The call is not one the host can run.", 400)
    if abs(time.time() - body["issued"]) > FRESH:
        return _refuse(request, "stale", "The call is too old; send it again.", 403)
    if not cache.add(f"mcplet:handoff:nonce:{body['nonce']}", 1, 4 * FRESH):
        return _refuse(request, "replayed", "This call was already handed over.", 409)
    return JsonResponse(run(body))


def _parsed(raw):
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(body, dict) or storable.problem(body) is not None:
        return None
    for name, longest in FIELDS.items():
        if not isinstance(body.get(name), str) or len(body[name]) > longest:
            return None
    issued = body.get("issued")
    if not isinstance(issued, int | float) or isinstance(issued, bool) or not math.isfinite(issued):
        return None
    if not isinstance(body.get("arguments"), dict) or len(body["nonce"]) < 16:
        return None
    return body


def _refuse(request, reason, message, status):
    audit.record(
        REFUSED_EVENT,
        actor_type=audit.ActorType.SYSTEM,
        actor_id="handoff",
        result=audit.BLOCKED,
        details={"reason": reason, "remote": request.META.get("REMOTE_ADDR", "")},
    )
    return JsonResponse({"error": message, "reason": reason}, status=status)
