from django.urls import path, re_path

from a2a import api, bindings

AGENT = r"(?:(?P<agent_id>[-a-zA-Z0-9_]+)/)?"  # HTTP+JSON: the agent's URL, or the tenant

urlpatterns = [
    path("a2a/tasks", api.TaskList.as_view(), name="a2a-tasks"),
    path("a2a/tasks/<uuid:message_id>", api.TaskDetail.as_view(), name="a2a-task"),
    path("a2a/tasks/<uuid:message_id>/cancel", api.TaskCancel.as_view(), name="a2a-task-cancel"),
    path("a2a/agents", api.AgentList.as_view(), name="a2a-agents"),
    path("a2a/agents/me", api.OwnCard.as_view(), name="a2a-own-card"),
    path("a2a/agents/<slug:agent_id>", api.AgentDetail.as_view(), name="a2a-agent"),
    # The standard A2A 1.0 bindings (a2a.bindings): the host at /a2a/v1, each agent under it.
    path(".well-known/agent-card.json", bindings.public_card, name="a2a-public-card"),
    path("a2a/v1/.well-known/agent-card.json", bindings.public_card),  # (the same, at /a2a/v1)
    re_path(
        rf"^a2a/v1/{AGENT}message:(?P<verb>send|stream)$",
        bindings.Rest.as_view(),
        {"resource": "message"},
    ),
    re_path(rf"^a2a/v1/{AGENT}tasks$", bindings.Rest.as_view(), {"resource": "tasks"}),
    re_path(
        rf"^a2a/v1/{AGENT}tasks/(?P<task_id>[^/:]+)(?::(?P<verb>cancel|subscribe))?$",
        bindings.Rest.as_view(),
        {"resource": "task"},
    ),
    re_path(
        rf"^a2a/v1/{AGENT}tasks/(?P<task_id>[^/:]+)/pushNotificationConfigs"
        r"(?:/(?P<config_id>[^/]+))?$",
        bindings.Rest.as_view(),
        {"resource": "push"},
    ),
    re_path(rf"^a2a/v1/{AGENT}extendedAgentCard$", bindings.Rest.as_view(), {"resource": "card"}),
    path("a2a/v1", bindings.JsonRpc.as_view(), name="a2a-jsonrpc"),
    path("a2a/v1/<slug:agent_id>", bindings.JsonRpc.as_view(), name="a2a-agent-jsonrpc"),
    path(
        "a2a/v1/<slug:agent_id>/.well-known/agent-card.json",
        bindings.AgentCard.as_view(),
        name="a2a-agent-card",
    ),
    re_path(r"^a2a/", api.UnknownEndpoint.as_view()),
]
