"""The host's URLs with the passkey app included (ceremony links, e-mails), for as long as the
project's urls.py does not include it yet."""

from django.urls import include, path

from mcplet_host.urls import urlpatterns as host_patterns

urlpatterns = list(host_patterns)
if not any(getattr(p, "namespace", None) == "passkey" for p in urlpatterns):
    urlpatterns.append(path("", include("passkey.urls")))
