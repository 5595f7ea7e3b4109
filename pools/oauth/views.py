"""The host's side of OAuth flows: the callback an authorization server sends the operator's
browser back to, and the host's Client ID Metadata Document. (Connect and disconnect are admin
pages: pools.admin.)"""

from django.conf import settings
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import JsonResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from pools.oauth import connect

OUTCOME_WAIT = 30  # seconds the callback waits for the exchange and discovery


def origin():
    """The host's public origin (the one approval links use)."""
    return settings.PASSKEY_ORIGIN.rstrip("/")


def redirect_uri():
    return origin() + reverse("oauth-callback")


def client_metadata_url():
    """Where the host's Client ID Metadata Document is, when an authorization server may use
    it: only an https:// origin can be a client ID (the CIMD draft)."""
    url = origin() + reverse("oauth-client-metadata")
    return url if url.startswith("https://") else None


@require_GET
def client_metadata(request):
    """The document whose URL is the host's client ID, fetched by authorization servers."""
    return JsonResponse(
        {
            "client_id": origin() + reverse("oauth-client-metadata"),
            "client_name": connect.CLIENT_NAME,
            "client_uri": origin() + "/",
            "redirect_uris": [redirect_uri()],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }
    )


@never_cache
@require_GET
@staff_member_required
def callback(request):
    """Where the authorization server sends the operator back: the code goes to the flow that
    asked for it (by `state`, and only for the operator who started it); the page then says how
    the connection ended."""
    flow_id = connect.flow_of_state(request.GET.get("state"))
    state = connect.flow(flow_id)
    if state is None:
        messages.error(
            request,
            "This authorization response belongs to no connection in progress "
            "(it expired, or was used already). Start again with Connect….",
        )
        return redirect("admin:pools_mcpserver_changelist")
    if state.get("operator") != request.user.get_username():
        raise PermissionDenied("This connection was started by another operator.")
    if "response" not in state:
        connect.answer(
            flow_id,
            request.GET.get("code", ""),
            request.GET.get("state"),
            request.GET.get("iss"),
            error=_error(request.GET),
        )
    ended = connect.wait(flow_id, lambda s: "outcome" in s, OUTCOME_WAIT)
    outcome = (ended or {}).get("outcome")
    if outcome is None:
        messages.warning(request, "The connection is still being finished: reload in a moment.")
    else:
        (messages.success if outcome["ok"] else messages.error)(request, outcome["message"])
    return redirect("admin:pools_mcpserver_change", state["server"])


def _error(params):
    """An error response (RFC 6749 §4.1.2.1), in one line, or "" when there is a code."""
    if params.get("code"):
        return ""
    error = params.get("error", "no code")[:100]
    description = params.get("error_description", "")[:300]
    return f"{error} ({description})" if description else error
