from django.http import JsonResponse
from django.views import csrf
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from mcplet_host import audit, health


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
