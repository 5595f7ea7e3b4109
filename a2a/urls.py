from django.urls import path, re_path

from a2a import api

urlpatterns = [
    path("a2a/tasks", api.TaskList.as_view(), name="a2a-tasks"),
    path("a2a/tasks/<uuid:message_id>", api.TaskDetail.as_view(), name="a2a-task"),
    path("a2a/tasks/<uuid:message_id>/cancel", api.TaskCancel.as_view(), name="a2a-task-cancel"),
    path("a2a/agents", api.AgentList.as_view(), name="a2a-agents"),
    path("a2a/agents/me", api.OwnCard.as_view(), name="a2a-own-card"),
    path("a2a/agents/<slug:agent_id>", api.AgentDetail.as_view(), name="a2a-agent"),
    re_path(r"^a2a/", api.UnknownEndpoint.as_view()),
]
