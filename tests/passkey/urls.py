"""The host's URLs with the passkey app included, for tests that run before (or after) the
project's urls.py includes it."""

from django.urls import include, path

from mcplet_host.urls import urlpatterns as host_patterns

urlpatterns = list(host_patterns)
if not any(getattr(p, "namespace", None) == "passkey" for p in urlpatterns):
    urlpatterns.append(path("", include("passkey.urls")))
