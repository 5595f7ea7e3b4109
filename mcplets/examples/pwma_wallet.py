"""A reference PWMA wallet (PWMA over MCP 0.2.0) and the presence provider that steps it up.

    python -m mcplets.examples.pwma_wallet [--port 8767] [--calls-log calls.jsonl]
        [--transport streamable-http|stdio]

One streamable-HTTP process serves the MCP endpoint (`/mcp`) with the profile's three tools
and a tiny presence provider page (`/presence/<elicitationId>`). A mandate needs the holder's
presence: the first `aaif.pwma.request` for a `requestId` answers JSON-RPC -32042 with a QR
and a URL elicitation (§3.3, §3.4); once the holder approves on the provider page, the wallet
sends `notifications/elicitation/complete` to the sessions that asked, and the same request
(same `requestId`) returns the mandate (§3.5: idempotent on `requestId`). A client that did
not declare URL elicitations is refused with -32041: it could not show the step. (Over stdio
the provider page is not served: that transport is for checking a host's declarations.)

`serve` runs it in a child process for tests and yields its base URL.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from mcplets import register_model_tool, serving, utc_timestamp

POLICY_DENIED, BAD_REQUEST, INTERACTION_REQUIRED = -32040, -32041, -32042
MAX_AMOUNT = 500  # the holder's policy: mandates above this are denied outright

METADATA = {
    "pwma": "reference-wallet",
    "profiles": ["pwma-over-mcp-0.2.0"],
    "intents": ["mandate"],
    "elicitationModes": ["url", "qr"],
}


@dataclass
class StepUp:
    """One request waiting for its holder's presence."""

    request_id: str
    intent: dict[str, Any]
    elicitation_id: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    done: bool = False
    sessions: list[Any] = field(default_factory=list)  # who to tell when it is done


class Wallet:
    def __init__(self, provider_url: str, calls_log: Path | None = None) -> None:
        self.provider_url = provider_url.rstrip("/")
        self.calls_log = calls_log
        self.steps: dict[str, StepUp] = {}  # by requestId
        self.artifacts: dict[str, dict[str, Any]] = {}  # by ref

    def log(self, name: str, arguments: dict[str, Any]) -> None:
        if self.calls_log is not None:
            with self.calls_log.open("a", encoding="utf-8") as file:
                file.write(json.dumps({"name": name, "arguments": arguments}) + "\n")

    async def request(
        self, requestId: str, ctx: Context, walletIntent: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        self.log("aaif.pwma.request", {"requestId": requestId, "walletIntent": walletIntent})
        capabilities = ctx.client_capabilities
        if capabilities is None or capabilities.elicitation is None:
            raise MCPError(BAD_REQUEST, "this wallet needs a host that shows URL elicitations")
        if not isinstance(walletIntent, dict) or walletIntent.get("type") != "mandate":
            raise MCPError(BAD_REQUEST, "this reference wallet only grants mandates")
        amount = walletIntent.get("maxAmount", 0)
        if not isinstance(amount, int | float) or amount > MAX_AMOUNT:
            raise MCPError(POLICY_DENIED, f"the holder's policy allows mandates up to {MAX_AMOUNT}")
        step = self.steps.setdefault(requestId, StepUp(requestId, walletIntent))
        if not step.done:
            step.sessions.append(ctx.session)
            raise MCPError(INTERACTION_REQUIRED, "the holder must approve", self.elicit(step))
        return self.mandate(step)

    def elicit(self, step: StepUp) -> dict[str, Any]:
        """§3.4: a QR for the holder's phone and the same step as a URL on the provider."""
        url = f"{self.provider_url}/presence/{step.elicitation_id}"
        message = f"Approve a mandate for {step.intent.get('payee', 'a payee')}"
        return {
            "elicitations": [
                {
                    "elicitationId": step.elicitation_id,
                    "mode": "qr",
                    "message": message,
                    "qrPayload": f"happ:v1:{step.elicitation_id}:{url}",
                },
                {
                    "elicitationId": step.elicitation_id,
                    "mode": "url",
                    "message": message,
                    "url": url,
                },
            ]
        }

    def mandate(self, step: StepUp) -> dict[str, Any]:
        """The same artifacts for every retry of one requestId (§3.5)."""
        ref = f"mandate-{step.request_id}"
        if ref not in self.artifacts:
            self.artifacts[ref] = {
                "type": "pwma.mandate",
                "ref": ref,
                "intent": step.intent,
                "issuedAt": utc_timestamp(),
            }
        return {
            "requestId": step.request_id,
            "status": "completed",
            "artifacts": [self.artifacts[ref]],
            "receipt": {"type": "pwma.receipt", "requestId": step.request_id},
        }

    def get(self, ref: str) -> dict[str, Any]:
        self.log("aaif.pwma.get", {"ref": ref})
        if ref not in self.artifacts:
            raise MCPError(BAD_REQUEST, f"no artifact {ref!r}")
        return {"artifacts": [self.artifacts[ref]]}

    def metadata(self) -> dict[str, Any]:
        self.log("aaif.pwma.metadata", {})
        return METADATA

    # -- the presence provider

    def step_for(self, elicitation_id: str) -> StepUp | None:
        return next((s for s in self.steps.values() if s.elicitation_id == elicitation_id), None)

    async def presence_page(self, request: Request) -> Response:
        step = self.step_for(request.path_params["elicitation_id"])
        if step is None:
            return HTMLResponse("<h1>Unknown step</h1>", status_code=404)
        if request.method == "POST":
            await self.complete(step)
        what = html.escape(json.dumps(step.intent, sort_keys=True))
        if step.done:
            body = "<p id='done'>Approved. You can close this page.</p>"
        else:
            body = "<form method='post'><button id='approve'>I approve</button></form>"
        return HTMLResponse(
            f"<!doctype html><title>Presence provider</title><h1>Approve this mandate</h1>"
            f"<pre>{what}</pre>{body}"
        )

    async def complete(self, step: StepUp) -> None:
        step.done = True
        sessions, step.sessions = step.sessions, []
        for session in sessions:
            with contextlib.suppress(Exception):  # a session that left hears nothing
                await session.send_elicit_complete(step.elicitation_id)


def build(provider_url: str, calls_log: Path | None = None) -> MCPServer:
    """The wallet; its step-ups send the holder to the presence provider at `provider_url`."""
    wallet = Wallet(provider_url, calls_log)
    server = MCPServer("pwma-wallet")
    register_model_tool(
        server,
        "aaif.pwma.request",
        wallet.request,
        mcplet_type="prepare",
        description="Ask the holder's wallet for a mandate (PWMA-INTENT); may need the "
        "holder's presence first",
    )
    register_model_tool(
        server,
        "aaif.pwma.get",
        wallet.get,
        mcplet_type="read",
        description="Fetch a wallet artifact by reference",
    )
    register_model_tool(
        server,
        "aaif.pwma.metadata",
        wallet.metadata,
        mcplet_type="read",
        description="The wallet's PWMA-CONFIG",
    )
    server.custom_route("/presence/{elicitation_id}", ["GET", "POST"])(wallet.presence_page)
    # PWMA over MCP 0.2.0 is built on 2025-11-25's shapes: a -32042 step-up, then the wallet's
    # notifications/elicitation/complete to the session that asked (2026-07-28 has neither).
    serving.one_generation(server, "2025")
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8767)
    parser.add_argument("--calls-log", type=Path)
    parser.add_argument(
        "--provider-url", help="where the provider page is reached (default: this server)"
    )
    parser.add_argument(
        "--transport", choices=["streamable-http", "stdio"], default="streamable-http"
    )
    args = parser.parse_args(argv)
    server = build(args.provider_url or f"http://{args.host}:{args.port}", args.calls_log)
    if args.transport == "stdio":
        # The handshake-only stdio loop, as the SDK's own Client reaches an MCPServer's.
        anyio.run(serving.serve, server._lowlevel_server, "stdio", "", 0, "2025")
    else:
        with serving.traced(server.name):
            server.run("streamable-http", host=args.host, port=args.port)


@contextlib.contextmanager
def serve(
    calls_log: Path | None = None, timeout: float = 20, provider_host: str = "127.0.0.1"
) -> Iterator[str]:
    """Run the wallet in a child process on a free port; yield its base URL (`/mcp` is the
    MCP endpoint). Its step-ups name `provider_host` (e.g. `localhost`: another domain)."""
    port = serving.free_port()
    command = [sys.executable, "-m", "mcplets.examples.pwma_wallet", "--port", str(port)]
    command += ["--provider-url", f"http://{provider_host}:{port}"]
    if calls_log is not None:
        command += ["--calls-log", str(Path(calls_log).resolve())]
    with serving.listening(command, port, timeout):
        yield f"http://127.0.0.1:{port}"


if __name__ == "__main__":
    main()
