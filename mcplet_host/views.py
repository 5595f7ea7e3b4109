from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from mcplet_host import health


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
