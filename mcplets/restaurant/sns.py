"""The SNS MCPlet: `post_sns` (action, media-pool, app-only, passkey strict) — posts to the
store's social account through the restaurant's SNS service, only after the host confirmed the
approver's passkey assertion for exactly this call.

    python -m mcplets.restaurant.sns [--transport streamable-http --port 9103]

Environment: as `mcplets.restaurant.mail` (`RESTAURANT_API_URL`, `MCPLET_VERIFY_URL`,
`MCPLET_VERIFY_TOKEN`).
"""

from typing import Annotated, Literal

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from mcplets import averify_assertion, register_app_tool
from mcplets.restaurant.common import Tool, api_post, call_arguments, main, request_meta

TOOL = Tool("post_sns", "action", ("app",))
server = MCPServer("restaurant-sns")
AUTH = {
    "required": "passkey",
    "enforcement": "strict",
    "promptMessage": "SNS投稿を承認してください",
}

RESULT_SCHEMA = {
    "type": "object",
    "properties": {
        "postId": {"type": "string"},
        "platform": {"enum": ["x", "instagram", "line"]},
        "url": {"type": "string"},
        "postedAt": {"type": "string"},
        "text": {"type": "string"},
    },
    "required": ["postId", "platform", "url", "postedAt"],
}


async def post_sns(
    text: Annotated[
        str,
        Field(
            min_length=1,
            max_length=2200,
            description="the post (x: at most 280 characters); no personal data",
        ),
    ],
    ctx: Context,
    platform: Annotated[
        Literal["x", "instagram", "line"], Field(description="where to post")
    ] = "x",
):
    refused = await averify_assertion(
        ctx,
        TOOL.name,
        call_arguments(ctx, {"text": text, "platform": platform}),
        visibility=list(TOOL.visibility),
    )
    if refused is not None:
        return refused
    key = request_meta(ctx, "idempotencyKey")  # the host's, per approved call
    answer = await anyio.to_thread.run_sync(
        lambda: api_post("/sns/post", {"platform": platform, "text": text}, idempotency_key=key)
    )
    return TOOL.answer(answer, f"Posted to {answer['platform']}: {answer['url']}")


register_app_tool(
    server,
    TOOL.name,
    post_sns,
    mcplet_type="action",
    title="Post to SNS",
    description="Post a message to the store's social account (x, instagram or line). Needs "
    "the store manager's passkey approval: 'SNS投稿を承認してください' (please approve the "
    "SNS post).",
    pool="media-pool",
    auth=AUTH,
    result_schema=RESULT_SCHEMA,
)

if __name__ == "__main__":
    main(server, 9103, __doc__)
