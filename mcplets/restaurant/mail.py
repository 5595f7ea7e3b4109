"""The e-mail MCPlet: `send_email` (action, media-pool, app-only, passkey strict) — sends one
message per recipient through the restaurant's mail service, only after the host confirmed
that the approver's passkey assertion authorises exactly this call.

    python -m mcplets.restaurant.mail [--transport streamable-http --port 9102]

Environment: `RESTAURANT_API_URL` (the mail service), `MCPLET_VERIFY_URL` (the host's
`/auth/verify-assertion`) and `MCPLET_VERIFY_TOKEN` (this server's verify token).
"""

from typing import Annotated

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from mcplets import averify_assertion, register_app_tool
from mcplets.restaurant.common import Tool, api_post, call_arguments, main, request_meta

TOOL = Tool("send_email", "action", ("app",))
server = MCPServer("restaurant-mail")
AUTH = {
    "required": "passkey",
    "enforcement": "strict",
    "promptMessage": "メール送信を承認してください",
}

RESULT_SCHEMA = {
    "type": "object",
    "properties": {
        "transport": {"const": "smtp"},
        "server": {"type": "string", "description": "the SMTP server that took the messages"},
        "sent": {"type": "integer"},
        "failed": {"type": "integer"},
        "messages": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "to": {"type": "string"},
                    "messageId": {"type": "string"},
                    "status": {"enum": ["sent", "failed"]},
                    "error": {"type": "string"},
                },
                "required": ["to", "messageId", "status"],
            },
        },
    },
    "required": ["sent", "failed", "messages"],
}


async def send_email(
    to: Annotated[
        list[str],
        Field(
            min_length=1,
            max_length=200,
            description="recipients: 'name@example.jp' or '佐藤 花子 <name@example.jp>'; each "
            "gets their own message",
        ),
    ],
    subject: Annotated[str, Field(min_length=1, max_length=200)],
    body: Annotated[
        str,
        Field(
            min_length=1,
            max_length=20_000,
            description="plain text; {name} is replaced by each recipient's name",
        ),
    ],
    ctx: Context,
):
    # The kit already answered AUTH_REQUIRED if no assertion came with the call. The host must
    # now confirm it for exactly these arguments, or nothing is sent.
    refused = await averify_assertion(
        ctx,
        TOOL.name,
        call_arguments(ctx, {"to": to, "subject": subject, "body": body}),
        visibility=list(TOOL.visibility),
    )
    if refused is not None:
        return refused
    key = request_meta(ctx, "idempotencyKey")  # the host's, per approved call
    answer = await anyio.to_thread.run_sync(
        lambda: api_post(
            "/email/send", {"to": to, "subject": subject, "body": body}, idempotency_key=key
        )
    )
    summary = f"Sent {answer['sent']} of {len(to)} e-mail(s) via {answer.get('transport', 'smtp')}"
    if answer["failed"]:
        summary += f"; {answer['failed']} failed"
    return TOOL.answer(answer, summary)


register_app_tool(
    server,
    TOOL.name,
    send_email,
    mcplet_type="action",
    title="Send e-mail",
    description="Send an e-mail to customers, one message per recipient (nobody sees another "
    "recipient's address; {name} in the subject or body becomes each recipient's name). Needs "
    "the store manager's passkey approval: 'メール送信を承認してください' (please approve "
    "sending the e-mail).",
    pool="media-pool",
    auth=AUTH,
    result_schema=RESULT_SCHEMA,
)

if __name__ == "__main__":
    main(server, 9102, __doc__)
