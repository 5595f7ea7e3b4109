"""A remote A2A agent built with the unmodified a2a-sdk server, run by the tests in the SDK's own
virtualenv (tests/a2a_sdk/sdk.py): `python -I server.py PORT TOKEN`. It serves its card at
/.well-known/agent-card.json and JSON-RPC at /, answers only `Authorization: Bearer TOKEN`, and
answers each message with a task whose artifact is a DataPart: {"answeredBy", "received"} where
"received" is the first DataPart it was sent (for us, the §18 task request)."""

import sys

import uvicorn
from a2a.helpers.proto_helpers import get_data_parts, new_data_part, new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.applications import Starlette
from starlette.responses import JSONResponse

NAME = "Weather oracle"


class Answering(AgentExecutor):
    async def execute(self, context, event_queue):
        task = context.current_task or new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        data = get_data_parts(context.message.parts)
        answer = {"answeredBy": NAME, "received": data[0] if data else None}
        await updater.add_artifact([new_data_part(answer)], name="answer")
        await updater.complete()

    async def cancel(self, context, event_queue):
        raise NotImplementedError


def app(port, token):
    url = f"http://127.0.0.1:{port}/"
    card = AgentCard(
        name=NAME,
        description="Answers every task with what it received.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["application/json"],
        default_output_modes=["application/json"],
        skills=[AgentSkill(id="oracle", name="oracle", description="Answers.", tags=["demo"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=Answering(), task_store=InMemoryTaskStore(), agent_card=card
    )
    starlette = Starlette(
        routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")]
    )

    async def guarded(scope, receive, send):
        headers = dict(scope.get("headers") or [])
        public = scope.get("path", "").startswith("/.well-known/")
        wrong = headers.get(b"authorization") != f"Bearer {token}".encode()
        if scope["type"] == "http" and not public and wrong:
            await JSONResponse({"error": "unauthorized"}, 401)(scope, receive, send)
            return
        await starlette(scope, receive, send)

    return guarded


if __name__ == "__main__":
    port, token = int(sys.argv[1]), sys.argv[2]
    uvicorn.run(app(port, token), host="127.0.0.1", port=port, log_level="warning")
