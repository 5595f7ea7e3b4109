from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView

from mcplet_host import handoff, views

admin.site.site_header = "MCPlet Host"
admin.site.site_title = "MCPlet Host"
admin.site.index_title = "Operate pools, servers, agents and partners"

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="dashboard:overview"), name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", views.metrics_endpoint, name="metrics"),
    # A command of this installation hands the running host a call (signed: mcplet_host.handoff).
    path("host/calls/", handoff.receive, name="handoff"),
    # Browsers ask for it on every page that names no icon (the admin's).
    path("favicon.ico", RedirectView.as_view(url=static("dashboard/favicon.svg"), permanent=True)),
    path("dashboard/", include("dashboard.urls")),
    path("admin/", admin.site.urls),
    path("", include("a2a.urls")),
    path("", include("passkey.urls")),
    path("", include("pools.oauth.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularRedocView.as_view(url_name="schema"), name="api-docs"),
]
