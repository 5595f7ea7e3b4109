from django.contrib import admin
from django.urls import path

from mcplet_host import views

admin.site.site_header = "MCPlet Host"
admin.site.site_title = "MCPlet Host"
admin.site.index_title = "Operate pools, servers, agents and partners"

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("admin/", admin.site.urls),
]
