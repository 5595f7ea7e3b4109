"""A tiny strict MCPlet built with the kit, as an MCPlet author would write it: it sends (here:
logs) an e-mail only after the host's verify-assertion endpoint said yes.

    python -m tests.passkey.strict_mailer   (stdio; MCPLET_VERIFY_URL, MCPLET_VERIFY_TOKEN and
                                              STRICT_MAILER_LOG set in its environment)
"""

import json
import os
import sys

from mcp.server.mcpserver import Context, MCPServer

from mcplets import register_app_tool, verify_assertion

TOOL = "mail_guests"
server = MCPServer("strict-mailer")


def mail_guests(to: list[str], body: str, ctx: Context) -> dict:
    refused = verify_assertion(ctx, TOOL, {"to": to, "body": body})
    with open(os.environ["STRICT_MAILER_LOG"], "a", encoding="utf-8") as log:
        verdict = refused["error"]["message"] if refused else "verified"
        log.write(json.dumps({"to": to, "body": body, "verdict": verdict}) + "\n")
    if refused:
        return refused
    return {"sent": len(to)}


register_app_tool(
    server,
    TOOL,
    mail_guests,
    mcplet_type="action",
    description="E-mail the guests (after the approver's passkey)",
    auth={"required": "passkey", "enforcement": "strict", "promptMessage": "Send this e-mail?"},
)

if __name__ == "__main__":
    print("strict-mailer on stdio", file=sys.stderr)
    server.run()
