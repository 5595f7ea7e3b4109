"""A notes MCPlet: one read, one prepare and one action tool.

Run it over stdio (how a host launches it) or streamable HTTP:

    python -m mcplets.examples.notes
    python -m mcplets.examples.notes --transport streamable-http --port 8765
"""

import argparse

from mcp.server.mcpserver import Context, MCPServer

from mcplets import (
    ErrorCode,
    MCPletError,
    mcplet_auth_from,
    register_app_tool,
    register_dual_tool,
    register_model_tool,
    serving,
)

server = MCPServer("notes")
NOTES: dict[int, str] = {1: "Rain tomorrow: offer a free dessert to keep bookings"}

NOTE_LIST_SCHEMA = {
    "type": "object",
    "properties": {
        "notes": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"id": {"type": "integer"}, "text": {"type": "string"}},
                "required": ["id", "text"],
            },
        }
    },
    "required": ["notes"],
}


def search_notes(contains: str = "") -> dict:
    # A plain return value: the kit wraps it in the §9.1 envelope.
    found = [{"id": i, "text": t} for i, t in NOTES.items() if contains.lower() in t.lower()]
    return {"notes": found}


def draft_note(text: str) -> dict:
    text = " ".join(text.split())
    if not text:
        raise MCPletError(ErrorCode.VALIDATION_ERROR, "a note needs some text")
    if text in NOTES.values():
        raise MCPletError("X_DUPLICATE_NOTE", "this note already exists")
    return {"text": text, "length": len(text)}


async def add_note(text: str, ctx: Context) -> dict:
    # `strict` auth: the kit has already refused the call if the host injected no assertion.
    assertion = mcplet_auth_from(ctx)
    # A real MCPlet sends the assertion to the FIDO2 server's verify-assertion endpoint here.
    if assertion.get("type") != "passkey_assertion":
        raise MCPletError(ErrorCode.AUTH_FAILED, "the approval is not a passkey assertion")
    note_id = max(NOTES, default=0) + 1
    NOTES[note_id] = text
    return {"id": note_id, "text": text}


register_model_tool(
    server,
    "search_notes",
    search_notes,
    mcplet_type="read",
    description="Search the notes whose text contains a word",
    result_schema=NOTE_LIST_SCHEMA,
)
register_dual_tool(
    server,
    "draft_note",
    draft_note,
    mcplet_type="prepare",
    description="Check and normalise a note before it is added",
)
register_app_tool(
    server,
    "add_note",
    add_note,
    mcplet_type="action",
    description="Add a note",
    pool="notes-pool",
    auth={"required": "passkey", "enforcement": "strict", "promptMessage": "Approve this note"},
)

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    with serving.traced(server.name):
        if args.transport == "stdio":
            server.run()
        else:
            server.run("streamable-http", port=args.port)
