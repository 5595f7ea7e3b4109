import hmac

from django.conf import settings
from django.http import Http404, HttpResponse, JsonResponse
from django.views import csrf
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from mcplet_host import audit, health, metrics


@never_cache
@require_GET
def healthz(request):
    checks = {}
    for name, probe in health.CHECKS.items():
        error = probe()
        checks[name] = {"status": "up"} if error is None else {"status": "down", "error": error}
    down = [name for name, check in checks.items() if check["status"] == "down"]
    body = {"status": "down" if down else "up", "down": down, "checks": checks}
    return JsonResponse(body, status=503 if down else 200)


@never_cache
@csrf_exempt  # a bearer token, no cookie: a POST is told 405, not the CSRF page
def metrics_endpoint(request):
    """Prometheus's scrape, for the bearer of METRICS_TOKEN only (compared in constant time);
    without a token set the endpoint does not exist, so nothing is shown by default."""
    token = settings.METRICS_TOKEN
    if not token:
        raise Http404
    scheme, _, sent = request.headers.get("Authorization", "").partition(" ")
    matches = hmac.compare_digest(sent.lstrip(" ").encode("utf-8", "replace"), token.encode())
    if scheme.lower() != "bearer" or not matches:  # RFC 9110 §11.1: any case of the scheme
        refused = HttpResponse("A bearer token is required.\n", status=401)
        refused["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return refused
    if request.method not in ("GET", "HEAD"):
        return HttpResponse(status=405, headers={"Allow": "GET, HEAD"})
    return HttpResponse(generate_latest(metrics.Scrape()), content_type=CONTENT_TYPE_LATEST)


def csrf_failure(request, reason=""):
    """Django's CSRF refusal (settings.CSRF_FAILURE_VIEW), audited: a POST without its token or
    from another origin is an attempt, whichever page it aimed at."""
    user = request.user if request.user.is_authenticated else None
    audit.record(
        "http.csrf_refused",
        actor_type=audit.ActorType.USER if user else audit.ActorType.SYSTEM,
        actor_id=user.get_username() if user else "",
        result=audit.BLOCKED,
        details={"method": request.method, "path": request.path[:200], "reason": reason},
    )
    return csrf.csrf_failure(request, reason)
