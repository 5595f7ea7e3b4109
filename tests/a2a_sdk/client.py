"""A partner agent built with the unmodified a2a-sdk client, run by the tests in the SDK's own
virtualenv (tests/a2a_sdk/sdk.py). It reads one JSON command a line on stdin and writes one
JSON line per result (several for a stream, the last one {"end": true}); an exception the SDK
raises is a result too: {"raised": class name, "message": ...}.

    {"op": "card", "url": ..., "key": ...}                      the resolved card
    {"op": "send", "url", "key", "binding", "message", "tenant"?, "stream"?, "push"?}
        each event; "push": a TaskPushNotificationConfig sent with the message
    {"op": "push_create", "url", "key", "binding", "config"}   the config the host stored
    {"op": "push_get" | "push_delete", "url", "key", "binding", "taskId", "id"}
    {"op": "push_list", "url", "key", "binding", "taskId"}
    {"op": "get" | "cancel" | "subscribe", "url", "key", "binding", "id"}
    {"op": "list", "url", "key", "binding", "contextId"?, "status"?}
    {"op": "extended", "url", "key", "binding"}
    {"op": "cards", "url": the host's origin, "key", "binding", "skill", "message"}
        from the cards alone: the public card, the extended one, the chosen skill's interface
        of that binding (its tenant), then send; each event
"""

import asyncio
import json
import sys

import httpx
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
)
from google.protobuf.json_format import MessageToDict, ParseDict


def emit(value):
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


def http(command):
    headers = {"Authorization": f"Bearer {command['key']}"} if command.get("key") else {}
    return httpx.AsyncClient(headers=headers, timeout=60)


async def client_for(command):
    config = ClientConfig(
        httpx_client=http(command),
        supported_protocol_bindings=[command.get("binding", "JSONRPC")],
        streaming=bool(command.get("stream")),
    )
    return await create_client(command["url"], client_config=config)


async def from_the_cards(command):
    """A client that knows the host's origin and a skill's id, nothing of its URLs."""
    async with http(command) as resolving:
        public = await A2ACardResolver(resolving, command["url"]).get_agent_card()
    config = ClientConfig(
        httpx_client=http(command), supported_protocol_bindings=[command["binding"]]
    )
    host = await create_client(public, client_config=config)
    extended = await host.get_extended_agent_card(GetExtendedAgentCardRequest())
    await host.close()
    (skill,) = [s for s in extended.skills if s.id == command["skill"]]
    chosen = [
        i
        for i in extended.supported_interfaces
        if i.tenant == skill.id and i.protocol_binding == command["binding"]
    ]
    card = AgentCard()
    card.CopyFrom(extended)
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(chosen)
    return await create_client(card, client_config=config)


async def run(command):
    op = command["op"]
    if op == "card":
        async with http(command) as resolving:
            emit(MessageToDict(await A2ACardResolver(resolving, command["url"]).get_agent_card()))
        return
    client = await (from_the_cards if op == "cards" else client_for)(command)
    try:
        if op == "extended":
            emit(MessageToDict(await client.get_extended_agent_card(GetExtendedAgentCardRequest())))
        elif op in ("send", "cards"):
            request = SendMessageRequest(
                message=ParseDict(command["message"], Message()), tenant=command.get("tenant", "")
            )
            if command.get("push"):
                request.configuration.CopyFrom(
                    SendMessageConfiguration(
                        task_push_notification_config=ParseDict(
                            command["push"], TaskPushNotificationConfig()
                        ),
                        return_immediately=True,
                    )
                )
            async for event in client.send_message(request):
                emit(MessageToDict(event))
        elif op == "get":
            emit(MessageToDict(await client.get_task(GetTaskRequest(id=command["id"]))))
        elif op == "cancel":
            emit(MessageToDict(await client.cancel_task(CancelTaskRequest(id=command["id"]))))
        elif op == "subscribe":
            async for event in client.subscribe(SubscribeToTaskRequest(id=command["id"])):
                emit(MessageToDict(event))
        elif op == "push_create":
            config = ParseDict(command["config"], TaskPushNotificationConfig())
            emit(MessageToDict(await client.create_task_push_notification_config(config)))
        elif op == "push_get":
            request = GetTaskPushNotificationConfigRequest(
                task_id=command["taskId"], id=command["id"]
            )
            emit(MessageToDict(await client.get_task_push_notification_config(request)))
        elif op == "push_list":
            request = ListTaskPushNotificationConfigsRequest(task_id=command["taskId"])
            emit(MessageToDict(await client.list_task_push_notification_configs(request)))
        elif op == "push_delete":
            request = DeleteTaskPushNotificationConfigRequest(
                task_id=command["taskId"], id=command["id"]
            )
            emit({"deleted": await client.delete_task_push_notification_config(request) is None})
        elif op == "list":
            request = ListTasksRequest(
                context_id=command.get("contextId", ""),
                status=command.get("status", "TASK_STATE_UNSPECIFIED"),
                include_artifacts=True,
            )
            emit(MessageToDict(await client.list_tasks(request)))
    finally:
        await client.close()


async def main():
    for line in sys.stdin:
        command = json.loads(line)
        try:  # a test never hangs on a stream that does not end
            await asyncio.wait_for(run(command), command.get("timeout", 60))
        except Exception as exc:  # what the SDK raised is the result the test checks
            emit({"raised": type(exc).__name__, "message": str(exc)})
        emit({"end": True})


if __name__ == "__main__":
    asyncio.run(main())
