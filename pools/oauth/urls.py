from django.urls import path

from pools.oauth import views

urlpatterns = [
    path("oauth/callback", views.callback, name="oauth-callback"),
    path("oauth/client-metadata.json", views.client_metadata, name="oauth-client-metadata"),
]
