"""The host's URLs with the passkey views included, whether or not the project's urls.py
includes them yet."""

from django.urls import include, path

from mcplet_host.urls import urlpatterns as host_patterns

urlpatterns = list(host_patterns)
if not any(getattr(p, "namespace", None) == "passkey" for p in urlpatterns):
    urlpatterns.append(path("", include("passkey.urls")))
