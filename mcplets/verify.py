"""Backend verification for strict tools (spec §7.1.2, §7.2 Phase 6): one call that asks the
host's `POST /auth/verify-assertion` whether the injected passkey assertion authorises exactly
this call. Standard library only; nothing from the host.

    @app_tool(server, mcplet_type="action", auth={"required": "passkey",
              "enforcement": "strict", "promptMessage": "Send this e-mail?"})
    def send_email(to: list[str], body: str, ctx: Context):
        refused = verify_assertion(ctx, "send_email", {"to": to, "body": body})
        if refused:
            return refused
        ...  # the business logic runs only after a definite "verified"

`MCPLET_VERIFY_URL` (e.g. https://host.example/auth/verify-assertion) and `MCPLET_VERIFY_TOKEN`
(created for this server in the host's admin) configure it.
"""

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

import anyio.to_thread

from mcplets.envelope import Envelope, ErrorCode, error
from mcplets.registration import mcplet_auth_from

URL_ENV = "MCPLET_VERIFY_URL"
TOKEN_ENV = "MCPLET_VERIFY_TOKEN"  # noqa: S105 (a variable name)
TIMEOUT = 10.0


def verify_assertion(
    ctx_or_mcplet_auth: Any,
    tool: str,
    arguments: Mapping[str, Any],
    *,
    url: str | None = None,
    token: str | None = None,
    timeout: float = TIMEOUT,
    mcplet_type: str = "action",
    visibility: Sequence[str] | None = None,
) -> Envelope | None:
    """None when the host verified the assertion for exactly `tool` with `arguments`; else the
    §9.1 error envelope to return: AUTH_REQUIRED (no assertion was injected), AUTH_FAILED
    (refused; the host's reason is in the message) or SERVICE_UNAVAILABLE (host unreachable).

    `ctx_or_mcplet_auth` is the tool's Context or the `mcplet_auth` dict itself. Blocking: an
    async handler should use `averify_assertion`.
    """
    identity = {"tool_id": tool, "mcplet_type": mcplet_type, "visibility": visibility}
    auth = ctx_or_mcplet_auth
    if auth is not None and not isinstance(auth, Mapping):
        auth = mcplet_auth_from(auth)
    if not auth:
        return error(
            ErrorCode.AUTH_REQUIRED,
            "this tool needs a Passkey assertion in params._meta.mcplet_auth",
            **identity,
        )
    setting = "" if url else f" (set in {URL_ENV})"
    url = url or os.environ.get(URL_ENV, "")
    token = token if token is not None else os.environ.get(TOKEN_ENV, "")
    if not url.startswith(("http://", "https://")):
        return error(
            ErrorCode.SERVICE_UNAVAILABLE,
            f"no verify-assertion endpoint is configured (set {URL_ENV})",
            retryable=False,
            **identity,
        )
    body = json.dumps({"mcplet_auth": dict(auth), "tool": tool, "arguments": dict(arguments)})
    request = urllib.request.Request(  # noqa: S310 (the scheme is checked above)
        url,
        data=body.encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            status, answer = response.status, _json(response.read())
    except urllib.error.HTTPError as exc:
        status, answer = exc.code, _json(exc.read())
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)  # URLError wraps the socket's error
        return _unavailable(
            f"the verify-assertion endpoint {url}{setting} is unreachable: {reason}",
            identity,
        )
    if status == 200 and answer.get("verified") is True:
        return None
    if status >= 500 or not isinstance(answer.get("verified"), bool):
        return _unavailable(
            f"the verify-assertion endpoint {url}{setting} answered HTTP {status}", identity
        )
    reason = answer.get("reason") or "refused"
    message = answer.get("message") or "the host did not verify the passkey assertion"
    return error(ErrorCode.AUTH_FAILED, f"{reason}: {message}", **identity)


async def averify_assertion(
    ctx_or_mcplet_auth: Any, tool: str, arguments: Mapping[str, Any], **options: Any
) -> Envelope | None:
    """`verify_assertion` for async handlers: the HTTP round trip runs in a worker thread."""
    if ctx_or_mcplet_auth is not None and not isinstance(ctx_or_mcplet_auth, Mapping):
        ctx_or_mcplet_auth = mcplet_auth_from(ctx_or_mcplet_auth)  # read it on the loop
    return await anyio.to_thread.run_sync(
        lambda: verify_assertion(ctx_or_mcplet_auth, tool, arguments, **options)
    )


def _json(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _unavailable(message: str, identity: dict[str, Any]) -> Envelope:
    return error(
        ErrorCode.SERVICE_UNAVAILABLE, message, retryable=True, retry_after_ms=5000, **identity
    )
