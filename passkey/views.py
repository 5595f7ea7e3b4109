"""The passkey pages (§3.7): registration, the ceremony page and its callback, and the
server-to-server verify-assertion endpoint (§7.1.2). Thin: the models decide."""

import json
import logging
from functools import wraps

from django.conf import settings
from django.contrib.auth.views import LoginView, redirect_to_login
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse, reverse_lazy
from django.utils.cache import add_never_cache_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import mark_safe
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from held.kinds import form as held_form
from held.kinds import rerun, step_up
from held.models import APPROVE_PERMISSION, Ceremony
from mcplet_host import kept, storable
from passkey import approvals, assertions, links, loopback
from passkey.assertions import Refused
from passkey.forms import ElicitationForm
from passkey.models import BackendToken, PasskeyCredential, audit_refusal
from pools.models import site_of

logger = logging.getLogger(__name__)

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


def passkey_page(view):
    """What every passkey response carries: the strict CSP (§16.3), no caching, and no
    referrer to other origins (the URL holds the ceremony token). `no-referrer` would not do:
    browsers then send `Origin: null`, and the callback checks the origin."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        response = view(request, *args, **kwargs)
        response["Content-Security-Policy"] = CSP
        response["Referrer-Policy"] = "same-origin"
        add_never_cache_headers(response)
        return response

    return wrapped


def approver_required(view):
    """Signed in, with the approve permission; pages answer with a clear 403 page, the JSON
    endpoints with JSON."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        page = request.method == "GET"
        user = request.user if request.user.is_authenticated else None
        if user is None:
            if page:
                return redirect_to_login(request.get_full_path(), reverse("passkey:login"))
            return _not_an_approver(request, view, "Sign in first.", 401, kwargs)
        if not user.has_perm(APPROVE_PERMISSION):
            if page:
                return render(request, "passkey/forbidden.html", status=403)
            return _not_an_approver(request, view, "You may not approve calls.", 403, kwargs)
        return view(request, *args, **kwargs)

    return wrapped


def _not_an_approver(request, view, message, status, kwargs):
    """An attempt at a passkey step by someone who may not take it: refused and audited."""
    refusal = Refused(assertions.NOT_AN_APPROVER, message, status)
    user = request.user if request.user.is_authenticated else None
    token = kwargs.get("token", "")
    # The call it concerns, named as every other refusal names it (its tool, server and trace).
    ceremony = Ceremony.objects.filter(token=token).first() if isinstance(token, str) else None
    tool = f"ceremony {token[:8]}" if token and ceremony is None else ""
    audit_refusal(view.__name__, refusal, ceremony=ceremony, user=user, tool=tool)
    return _error(refusal)


def _error(refusal):
    return JsonResponse({"error": refusal.message, "reason": refusal.reason}, status=refusal.status)


def _json(request):
    """The body, if it is a JSON object the host can store; else None, which every caller
    refuses as malformed (audited): hostile bodies — too large, nested past any limit, holding
    NUL, lone surrogates or infinite numbers — included."""
    try:
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError, RecursionError, RequestDataTooBig):
        return None
    return body if isinstance(body, dict) and storable.problem(body) is None else None


def _page_origin(request):
    """The origin this request's page runs on: a ceremony's loopback port, or the host's."""
    return request.META.get(loopback.ORIGIN_KEY) or settings.PASSKEY_ORIGIN


def _approval_origin(request):
    """Where an assertion may come from, or None: in localhost mode only the ceremony's own
    loopback port takes approvals (§16.3), never the host's fixed port."""
    if request.META.get(loopback.ORIGIN_KEY) or settings.PASSKEY_MODE == "https":
        return _page_origin(request)
    return None


def _ceremony(request, token):
    # A loopback server serves its own ceremony only (it routes nothing else here either).
    if request.META.get(loopback.CEREMONY_KEY, token) != token:
        raise Http404
    try:
        return kept.get(Ceremony, token=token)
    except Ceremony.DoesNotExist:
        return None


def _unknown(request, token, stage):
    refusal = Refused(assertions.UNKNOWN_CEREMONY, "There is no such approval.", 404)
    audit_refusal(stage, refusal, user=request.user, tool=f"ceremony {token[:8]}")
    return _error(refusal)


# --- sign-in and registration -----------------------------------------------------------------


class PasskeyLoginView(LoginView):
    """The approvers' sign-in, minimal like the other passkey pages, so a ceremony's loopback
    origin can serve it too."""

    template_name = "passkey/login.html"
    redirect_authenticated_user = True
    next_page = reverse_lazy("passkey:register")


login = passkey_page(PasskeyLoginView.as_view())


def _next(request):
    target = request.GET.get("next", "")
    safe = url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure())
    return target if safe else ""


@passkey_page
@approver_required
@require_GET
def register(request):
    passkeys = PasskeyCredential.objects.filter(user=request.user)
    context = {"passkeys": passkeys, "next": _next(request), "host": _host(request)}
    return render(request, "passkey/register.html", context)


@passkey_page
@approver_required
@require_POST
def register_options(request):
    try:
        return JsonResponse({"publicKey": PasskeyCredential.registration_options(request.user)})
    except Refused as refusal:
        return _error(refusal)


@passkey_page
@approver_required
@require_POST
def register_verify(request):
    body = _json(request) or {}  # not an object the host can store: no credential, refused
    try:
        passkey = PasskeyCredential.register(
            request.user, body.get("name") or "", body.get("credential"), _page_origin(request)
        )
    except Refused as refusal:
        return _error(refusal)
    return JsonResponse({"status": "registered", "name": passkey.name}, status=201)


# --- the ceremony page and its callback ---------------------------------------------------------


@passkey_page
@approver_required
@require_GET
def ceremony(request, token):
    ceremony = _ceremony(request, token)
    if ceremony is None:
        raise Http404("There is no such approval.")
    if ceremony.kind == Ceremony.Kind.STEP_UP:
        return _step_up(request, ceremony)
    if ceremony.kind in Ceremony.FORMS:
        return _form_page(request, ceremony, ElicitationForm(held_form.requested_schema(ceremony)))
    can_approve = _approval_origin(request) is not None
    pending = ceremony.status == Ceremony.Status.PENDING and not ceremony.is_overdue
    if pending and not can_approve and (live := loopback.live_url(token)):
        return _to_loopback(request, ceremony, live)
    return _page(request, ceremony, can_approve)


def _page(request, ceremony, can_approve, refusal=None):
    arguments = ceremony.arguments
    if not isinstance(arguments, dict):
        arguments = {"(value)": arguments}
    context = {
        "ceremony": ceremony,
        "state": _state(ceremony),
        "can_approve": can_approve,
        "has_passkey": PasskeyCredential.objects.active().filter(user=request.user).exists(),
        # Pairs, not the dict: a template would read an argument named "items" as the method.
        "arguments": list(arguments.items()),
        "arguments_json": storable.shown_json(ceremony.arguments, indent=2),
        "host": _host(request),
        # Back here after registering: the host's link leads on to the live loopback page.
        "back": ceremony.get_absolute_url(),
        "first": ceremony.rerun_of or ceremony,
        "may_run_again": rerun.refusal(ceremony) is None,
        "refusal": refusal,
    }
    status = refusal.status if refusal else 200
    return render(request, "passkey/ceremony.html", context, status=status)


@passkey_page
@approver_required
@require_POST
def open_page(request, token):
    """Localhost mode, on the host's own port: (re)start the ceremony's loopback page — e.g.
    after the host restarted, or for a call another process held — and go there."""
    ceremony = _ceremony(request, token)
    if ceremony is None:
        return _unknown(request, token, "open")
    return _open(request, ceremony)


def _open(request, ceremony):
    pending = ceremony.status == Ceremony.Status.PENDING and not ceremony.is_overdue
    if _approval_origin(request) is not None or not pending:
        return redirect(ceremony)  # approved here, or its page says it was decided
    try:
        live = loopback.live_url(ceremony.token) or loopback.serve(ceremony).url
    except OSError:
        logger.exception("Could not start the approval page of %s", ceremony)
        problem = Refused("unavailable", "The approval page could not be started; try again.", 503)
        return _page(request, ceremony, False, problem)
    return _to_loopback(request, ceremony, live)


def _to_loopback(request, ceremony, url):
    """The way from the host's port to the ceremony's own loopback page: a page on the host's
    origin whose link (followed at once by a script of its own) leads there. Never a redirect:
    the page's CSP (`form-action 'self'`) also governs the redirects that follow a form — the
    button above, the sign-in, "Run again" — and a browser stops them at the other port."""
    return render(request, "passkey/open.html", {"ceremony": ceremony, "url": url})


@passkey_page
@approver_required
@require_POST
def challenge(request, token):
    ceremony = _ceremony(request, token)
    if ceremony is None:
        return _unknown(request, token, "challenge")
    if _approval_origin(request) is None:
        return _loopback_only(request, ceremony, "challenge")
    try:
        return JsonResponse({"publicKey": approvals.issue_challenge(ceremony, request.user)})
    except Refused as refusal:
        return _error(refusal)


@passkey_page
@approver_required
@require_POST
def assertion(request, token):
    """The callback (§3.7): bound to this ceremony by its token, to this page's origin, and to
    this exact call by the challenge."""
    ceremony = _ceremony(request, token)
    if ceremony is None:
        return _unknown(request, token, "callback")
    origin = _approval_origin(request)
    if origin is None:
        return _loopback_only(request, ceremony, "callback")
    if request.headers.get("Origin") != origin:
        refusal = Refused(assertions.WRONG_ORIGIN, "This callback takes its own page only.", 403)
        audit_refusal("callback", refusal, ceremony=ceremony, user=request.user)
        return _error(refusal)
    try:
        approvals.approve_with_passkey(ceremony, request.user, _json(request), origin)
    except Refused as refusal:
        return _error(refusal)
    return JsonResponse({"status": "approved"})


@passkey_page
@approver_required
@require_POST
def reject(request, token):
    ceremony = _ceremony(request, token)
    if ceremony is None:
        return _unknown(request, token, "reject")
    if not ceremony.decline(Ceremony.Status.REJECTED, request.user):
        refusal = Refused(assertions.NOT_PENDING, "This call was already decided.", 410)
        audit_refusal("reject", refusal, ceremony=ceremony, user=request.user)
        return _error(refusal)
    return JsonResponse({"status": "rejected"})


def _qr_svg(payload):
    """The QR code of `payload` as inline SVG — a full QR code (phones' cameras and wallets do
    not read Micro QR) of its UTF-8 bytes (never turned into Shift JIS for kanji mode), at the
    most error correction its size allows — or None when it holds more than a QR code can
    (2,953 bytes): the page then shows it to copy."""
    import segno  # only step-up pages draw QR codes

    try:
        qr = segno.make_qr(payload, error="l", boost_error=True, encoding="utf-8")
    except segno.DataOverflowError:
        return None
    return mark_safe(qr.svg_inline(scale=4, border=2, omitsize=True))  # noqa: S308 (ours)


def _step_up(request, ceremony):
    """A step-up's page: each step with its domain in large type, a URL opened only after the
    person confirms (never a redirect, never embedded), a QR code drawn from the opaque payload
    on the server (an inline SVG: the CSP stays as strict)."""
    server = ceremony.mcplet.server if ceremony.mcplet else None
    server_domain = site_of(server.url) if server and server.url else ""
    confirmed = request.GET.get("open", "")
    steps = []
    for index, step in enumerate(ceremony.elicitations):
        shown = {"index": str(index), **step}
        if step.get("mode") == "qr":
            shown["svg"] = _qr_svg(step["qrPayload"])
        else:
            shown["elsewhere"] = step.get("domain") != server_domain
            shown["confirmed"] = confirmed == str(index)
        steps.append(shown)
    state = _state(ceremony)
    context = {
        "ceremony": ceremony,
        "state": state,
        "held_again": None if state == "pending" else Ceremony.objects.held_again(ceremony),
        "steps": steps,
        "server_domain": server_domain,
        "arguments_json": storable.shown_json(ceremony.arguments, indent=2),
    }
    return render(request, "passkey/step_up.html", context)


@passkey_page
@approver_required
@require_POST
def step(request, token):
    """The person's word on a step-up: "I have finished" (the call is sent again, once) or
    "Cancel" (it ends, nothing more runs)."""
    ceremony = _ceremony(request, token)
    if ceremony is None or ceremony.kind != Ceremony.Kind.STEP_UP:
        raise Http404("There is no such step.")
    if request.POST.get("action") == "finished":
        step_up.complete(ceremony, request.user)
    elif request.POST.get("action") == "cancel":
        ceremony.decline(Ceremony.Status.REJECTED, request.user)
    return redirect(ceremony)


@passkey_page
@approver_required
@require_POST
def run_again(request, token):
    """A person runs again a call whose outcome is unknown: a new ceremony for the same call,
    approved with a fresh passkey on its own page (the form's CSRF token: a person's click)."""
    ceremony = _ceremony(request, token)
    if ceremony is None:
        return _unknown(request, token, "run-again")
    try:
        again = rerun.run_again(ceremony, request.user)
    except Refused as refusal:
        return _page(request, ceremony, _approval_origin(request) is not None, refusal)
    return _open(request, again)  # in localhost mode, on to the re-run's own loopback page


def _form_page(request, ceremony, form, status=200):
    """A server's form request: who asks, for which call, the server's message, the form built
    from its schema, and Send / Decline / Cancel."""
    context = {
        "ceremony": ceremony,
        "state": _state(ceremony),
        "form": form,
        "arguments_json": storable.shown_json(ceremony.arguments, indent=2),
    }
    return render(request, "passkey/form.html", context, status=status)


@passkey_page
@approver_required
@require_POST
def answer(request, token):
    """The person's answer to a form request: `accept` (the form, validated against the
    server's schema), `decline` or `cancel`; the waiting call hands it to the server."""
    ceremony = _ceremony(request, token)
    if ceremony is None or ceremony.kind not in Ceremony.FORMS:
        raise Http404("There is no such form.")
    action = request.POST.get("action")
    if action not in ("accept", "decline", "cancel"):
        return _refused_answer(request, ceremony, assertions.MALFORMED, "Send, decline or cancel.")
    content = None
    if action == "accept":
        form = ElicitationForm(held_form.requested_schema(ceremony), request.POST)
        if not form.is_valid():
            audit_refusal(
                "answer",
                Refused(assertions.MALFORMED, "invalid answer", 400),
                ceremony=ceremony,
                user=request.user,
            )
            return _form_page(request, ceremony, form, status=400)
        content = form.content
    if not held_form.answer(ceremony, request.user, action, content):
        return _refused_answer(
            request, ceremony, assertions.NOT_PENDING, "This form was already answered.", 410
        )
    return redirect(ceremony)


def _refused_answer(request, ceremony, reason, message, status=400):
    refusal = Refused(reason, message, status)
    audit_refusal("answer", refusal, ceremony=ceremony, user=request.user)
    return _error(refusal)


def _loopback_only(request, ceremony, stage):
    refusal = Refused(
        assertions.LOOPBACK_ONLY, "In localhost mode, approve on the page's own port.", 403
    )
    audit_refusal(stage, refusal, ceremony=ceremony, user=request.user)
    return _error(refusal)


def _state(ceremony):
    if ceremony.status == Ceremony.Status.PENDING:
        return "expired" if ceremony.is_overdue else "pending"
    if ceremony.status in (Ceremony.Status.REJECTED, Ceremony.Status.EXPIRED):
        return ceremony.status
    if ceremony.status in (Ceremony.Status.FAILED, Ceremony.Status.OUTCOME_UNKNOWN):
        return "failed"  # approved, but the call did not do its work (or may not have)
    return "approved"


def _host(request):
    """The host's own origin for links from a loopback page (which serves one approval and
    closes), else "" (the links stay on this origin)."""
    return links.origin() if request.META.get(loopback.ORIGIN_KEY) else ""


# --- server to server -------------------------------------------------------------------------


@csrf_exempt
@require_POST
def verify_assertion(request):
    """`POST /auth/verify-assertion`: an MCP server asks whether `mcplet_auth` authorises
    exactly its call. A definite answer: {"verified": true} or {"verified": false, "reason"}."""
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    token = BackendToken.authenticate(raw.strip()) if scheme.lower() == "bearer" else None
    body = _json(request) or {}
    tool = body.get("tool")
    if token is None:
        refusal = Refused(assertions.UNAUTHENTICATED, "Send your server's verify token.", 401)
        audit_refusal("verify", refusal, tool=tool if isinstance(tool, str) else "")
        response = _verdict(refusal)
        response["WWW-Authenticate"] = 'Bearer realm="verify-assertion"'
        return response
    arguments = body.get("arguments", {})
    if not isinstance(tool, str) or not isinstance(arguments, dict) or "mcplet_auth" not in body:
        refusal = Refused(assertions.MALFORMED, "Send mcplet_auth, tool and arguments.", 400)
        audit_refusal("verify", refusal, server=token.server, tool=str(tool or ""))
        return _verdict(refusal)
    try:
        approvals.verify_for_backend(token.server, body["mcplet_auth"], tool, arguments)
    except Refused as refusal:
        return _verdict(refusal)
    return JsonResponse({"verified": True})


def _verdict(refusal):
    body = {"verified": False, "reason": refusal.reason, "message": refusal.message}
    return JsonResponse(body, status=refusal.status if refusal.status in (400, 401) else 200)
