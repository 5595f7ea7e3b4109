"""Included at `dashboard/` by mcplet_host.urls; the websocket route is in dashboard.routing."""

from django.urls import path

from dashboard import views

app_name = "dashboard"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("mcplets/", views.mcplets, name="mcplets"),
    path("mcplets/servers/<int:pk>/discover/", views.discover_server, name="discover"),
    path("mcplets/writing-an-mcplet/", views.writing_an_mcplet, name="writing-an-mcplet"),
    path("agents/", views.agents, name="agents"),
    path("runs/", views.runs, name="runs"),
    path("runs/<uuid:context_id>/", views.run_trace, name="trace"),
    path("approvals/", views.approvals, name="approvals"),
    path("audit/", views.audit, name="audit"),
    path("audit/export.jsonl", views.audit_export, name="audit-export"),
    path("audit/verify/", views.audit_verify, name="audit-verify"),
    path("control/", views.control, name="control"),
    path("control/directors/<int:pk>/run/", views.run_director, name="run-director"),
    path("control/directors/<int:pk>/schedule/", views.set_schedule, name="schedule"),
    path("control/agents/<int:pk>/enabled/", views.set_agent_enabled, name="agent-enabled"),
    path("control/servers/<int:pk>/enabled/", views.set_server_enabled, name="server-enabled"),
    path("control/runs/<uuid:pk>/cancel/", views.cancel_run, name="cancel-run"),
]
