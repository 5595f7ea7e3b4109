"""Request-wide refusals that no single view should have to repeat."""

from urllib.parse import urlparse

from channels.security.websocket import OriginValidator, WebsocketDenier
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpResponseBadRequest, JsonResponse
from django.http.request import split_domain_port, validate_host

from mcplet_host import audit


class RefuseUnservedHostMiddleware:
    """A Host header that names no host of ALLOWED_HOSTS reaches no view. Django refuses it
    too, the first time something asks for the host (CommonMiddleware, on every request), but
    with its HTML page and only a log line: a partner's client got no error it could read. A
    400 and an audit event instead, as for a NUL. First in the chain: nothing before it asks."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            request.get_host()
        except DisallowedHost:
            reason = "a Host header this server does not serve"
            return refused(request, reason, "The Host header names no host this server serves.")
        return self.get_response(request)


class RefuseNulMiddleware:
    """A NUL character in the path or the query string reaches no view: PostgreSQL refuses it
    in any query, so it could only end in a 500 (issue 14). A 400 and an audit event instead."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        query = request.META.get("QUERY_STRING", "")
        if "\x00" not in request.path and "%00" not in query and "\x00" not in query:
            return self.get_response(request)
        reason = "a NUL character in the path or query"
        return refused(request, reason, "The path or query holds a NUL character.")


def refused(request, reason, message):
    """A request refused before any view: audited, and answered 400 — in the partner API's
    error body on its paths."""
    user = getattr(request, "user", None)
    known = user is not None and user.is_authenticated
    audit.record(
        "http.request.refused",
        actor_type=audit.ActorType.USER if known else audit.ActorType.SYSTEM,
        actor_id=user.get_username() if known else "",
        result=audit.BLOCKED,
        details={
            "method": request.method,
            "path": request.path,
            "query": request.META.get("QUERY_STRING", ""),
            "reason": reason,
        },
    )
    if request.path.startswith("/a2a/"):
        return JsonResponse({"error": {"code": "VALIDATION_ERROR", "message": message}}, status=400)
    return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")


class SameOriginWebsocketValidator(OriginValidator):
    """A websocket is opened only from the host's own pages: its Origin must be the origin the
    Host header names (scheme, host and port; the host one of ALLOWED_HOSTS) or one of
    CSRF_TRUSTED_ORIGINS — Django's CSRF rule. AllowedHostsOriginValidator compares host names
    only, so a page on another port of the same host could ride the operator's session."""

    def __init__(self, application):
        super().__init__(application, allowed_origins=[])

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and self.same_origin(scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)

    def same_origin(self, scope):
        headers = dict(scope.get("headers", []))
        origin, host = headers.get(b"origin"), headers.get(b"host")
        if origin is None or host is None:
            return False
        origin, host = origin.decode("latin1"), host.decode("latin1")
        domain, _ = split_domain_port(host)
        if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
            return False
        scheme = "https" if scope.get("scheme") in ("wss", "https") else "http"
        parsed = urlparse(origin)
        return any(
            self.match_allowed_origin(parsed, allowed)
            for allowed in (f"{scheme}://{host}", *settings.CSRF_TRUSTED_ORIGINS)
        )
