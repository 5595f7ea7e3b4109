import re
import socket
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.utils import timezone

from held.kinds import result as held_result
from held.models import Asker, Ceremony
from mcplet_host.models import AuditEvent
from passkey import loopback
from passkey.models import REFUSED_EVENT
from passkey.views import CSP
from tests.passkey.conftest import hold_email, url

pytestmark = pytest.mark.django_db

STRICT_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


class Inventory(HTMLParser):
    """Every script, style and inline handler of a page."""

    def __init__(self):
        super().__init__()
        self.scripts, self.styles, self.inline = [], [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script":
            self.scripts.append(attrs.get("src"))
        if tag == "style":
            self.inline.append("<style>")
        if tag == "link" and attrs.get("rel") == "stylesheet":
            self.styles.append(attrs["href"])
        self.inline += [name for name in attrs if name == "style" or name.startswith("on")]


def test_the_page_shows_who_asks_which_tool_and_exactly_what_runs(approver_client, held):
    response = approver_client.get(url(held))
    assert response.status_code == 200
    page = response.content.decode()
    assert "dispatch-agent" in page and "send_email" in page and "reference" in page
    assert "Approve the e-mail" in page  # the tool's promptMessage
    for recipient in ("sato@example.jp", "kim@example.kr"):
        assert f'<li><span class="text">{recipient}</span></li>' in page
    assert '<span class="text">Free dessert tomorrow!</span>' in page
    assert 'id="approve"' in page and 'id="reject"' in page
    seconds = int(re.search(r'data-seconds-left="(\d+)"', page).group(1))
    assert 0 < seconds <= held.seconds_left + 1 and 'id="countdown"' in page


def test_the_arguments_are_escaped_not_interpreted(approver_client, registry):
    ceremony = hold_email(registry, {"to": ["<b>x</b>@example.org"], "body": "<script>x</script>"})
    page = approver_client.get(url(ceremony)).content.decode()
    assert "<script>x</script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page


def test_a_strict_csp_and_nothing_inline(approver_client, held):
    response = approver_client.get(url(held))
    assert response["Content-Security-Policy"] == STRICT_CSP == CSP
    assert response["Referrer-Policy"] == "same-origin"
    assert "no-store" in response["Cache-Control"] and response["X-Frame-Options"] == "DENY"
    inventory = Inventory()
    inventory.feed(response.content.decode())
    assert inventory.scripts == ["/static/passkey/ceremony.js"]
    styles = ["/static/passkey/passkey.css", "/static/passkey/shown.css"]
    assert inventory.styles == styles and inventory.inline == []
    for path in ("passkey/ceremony.js", "passkey/register.js", "passkey/passkey.css"):
        assert finders.find(path), path
    assert approver_client.get("/static/passkey/ceremony.js").status_code == 200


def test_the_page_js_uses_the_browsers_json_helpers():
    script = Path(finders.find("passkey/ceremony.js")).read_text()
    assert "parseRequestOptionsFromJSON" in script and "credential.toJSON()" in script
    assert "atob" not in script and "btoa" not in script  # no hand-written base64url
    assert "window.close()" in script
    assert "fetch(" in script and "http" not in script.replace("https://", "")


def test_sign_in_first(client, held):
    response = client.get(url(held))
    assert response.status_code == 302
    assert response["Location"].startswith("/passkey/login/?next=/passkey/ceremonies/")
    assert client.post(url(held, "challenge")).status_code == 401


def test_non_approvers_see_a_403_page(client, django_user_model, held):
    client.force_login(django_user_model.objects.create_user("cook", "c@example.org", "pw"))
    response = client.get(url(held))
    assert response.status_code == 403 and b"not an approver" in response.content
    assert b"sato@example.jp" not in response.content
    assert client.post(url(held, "reject")).status_code == 403
    held.refresh_from_db()
    assert held.status == Ceremony.Status.PENDING
    # Audited as every refusal of a step on a call is: its tool, server and trace named.
    refused = AuditEvent.objects.filter(event_type=REFUSED_EVENT, actor_id="cook").last()
    assert (refused.target_tool, refused.target_server) == (held.tool_name, held.server_name)
    assert refused.trace_id == held.trace_id and refused.details["ceremony"] == held.token[:8]


def test_a_second_reject_is_refused_and_audited(approver_client, held):
    assert approver_client.post(url(held, "reject")).status_code == 200
    again = approver_client.post(url(held, "reject"))
    assert again.status_code == 410 and again.json()["reason"] == "not_pending"
    refused = AuditEvent.objects.get(event_type=REFUSED_EVENT, details__stage="reject")
    assert (refused.target_tool, refused.details["reason"]) == (held.tool_name, "not_pending")


def test_an_unknown_ceremony_is_a_404(approver_client):
    assert approver_client.get("/passkey/ceremonies/no-such-token/").status_code == 404


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (Ceremony.Status.REJECTED, "Rejected: nothing ran"),
        (Ceremony.Status.EXPIRED, "Expired"),
        (Ceremony.Status.EXECUTED, "Approved"),
        # the server's message isolated from the page's sentence (passkey_tags.shown)
        (Ceremony.Status.FAILED, "The call failed: SERVICE_UNAVAILABLE: <bdi>http://127.0.0.1:9/v"),
    ],
)
def test_a_decided_ceremony_says_it_is_done(approver_client, held, status, text):
    error = {"code": "SERVICE_UNAVAILABLE", "message": "http://127.0.0.1:9/v is unreachable"}
    Ceremony.objects.filter(pk=held.pk).update(status=status, result={"error": error})
    page = approver_client.get(url(held)).content.decode()
    assert text in page and "This page is done" in page and 'id="approve"' not in page


def test_an_overdue_ceremony_cannot_be_approved(approver_client, held):
    Ceremony.objects.filter(pk=held.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    page = approver_client.get(url(held)).content.decode()
    assert 'data-state="expired"' in page and 'id="approve"' not in page


PLAN = {
    "plan": {
        "summary": "Offer a free dessert on rainy days",
        "measures": ["e-mail the guests", "lend umbrellas"],
        "targetCustomers": [
            {"name": "佐藤 花子", "email": "sato@example.jp"},
            {"name": "<b>Kim</b>", "email": "kim@example.kr", "vip": True},
        ],
        "email": {"subject": "Rain tomorrow", "body": "{name} 様\n\nA dessert awaits you.\n"},
    },
    "budget": 120,
    "notes": None,
}


def test_a_result_to_confirm_reads_as_text_lists_and_tables(approver_client):
    ceremony = held_result.hold(Asker("planning-agent"), PLAN, "Hand this plan to dispatch?")
    page = approver_client.get(url(ceremony)).content.decode()
    assert "Confirm the result of" in page and "planning-agent" in page
    assert "Hand this plan to dispatch?" in page
    shown = page.split('id="arguments"')[1].split("</table>\n")[0]
    assert "\\n" not in shown and "{&quot;" not in shown  # no JSON in the readable part
    assert '<dt>summary</dt><dd><span class="text">Offer a free dessert' in shown
    assert '<li><span class="text">lend umbrellas</span></li>' in shown
    # A list of objects is a table, one column per key; what one row lacks stays empty.
    assert '<th scope="col">name</th><th scope="col">email</th><th scope="col">vip</th>' in shown
    # Each cell names its column (a phone shows it above the value).
    assert '<td data-label="name"><span class="text">&lt;b&gt;Kim&lt;/b&gt;</span></td>' in shown
    assert '<td data-label="vip"><code>true</code></td>' in shown
    assert '<td data-label="vip"></td></tr>' in shown
    # Text with line breaks is a paragraph that keeps them, exactly.
    assert '<p class="text">{name} 様\n\nA dessert awaits you.\n</p>' in shown
    assert "<code>120</code>" in shown and "<code>null</code>" in shown
    assert "&quot;budget&quot;: 120" in page  # the exact JSON, one click away


def test_deep_nesting_is_shown_as_json(approver_client):
    deep = "bottom"
    for _ in range(30):
        deep = {"level": deep}
    ceremony = held_result.hold(Asker("planning-agent"), deep, "")
    response = approver_client.get(url(ceremony))
    assert response.status_code == 200 and '<pre class="json">' in response.content.decode()


def test_the_page_leads_back_and_to_registration(approver_client, held, approver):
    page = approver_client.get(url(held)).content.decode()
    back = url(held).replace("/", "%2F")
    assert 'id="to-passkeys" href="/passkey/register/"' in page
    assert f'href="/passkey/register/?next={url(held)}"' in page or f"next={back}" in page
    assert 'id="to-dashboard"' not in page  # the approver is not staff
    assert 'id="retry-help"' in page and 'id="cannot-close"' in page
    approver.is_staff = True
    approver.save()
    page = approver_client.get(url(held)).content.decode()
    assert 'id="to-dashboard" href="/dashboard/"' in page and 'href="/dashboard/approvals/"' in page


def test_localhost_mode_sends_the_approver_to_the_ceremonys_own_port(
    approver_client, held, settings
):
    settings.PASSKEY_MODE = "localhost"
    page = approver_client.get(url(held)).content.decode()
    assert "Open the approval page" in page and 'id="approve"' not in page
    with socket.create_server(("127.0.0.1", 0)) as elsewhere:  # another process's page
        live = f"http://localhost:{elsewhere.getsockname()[1]}{url(held)}"
        loopback.cache.set(loopback._url_key(held.token), live, 5)
        response = approver_client.get(url(held))  # a page that leads on: never a redirect
    assert response.status_code == 200 and f'id="go" class="button approve" href="{live}"' in (
        response.content.decode()
    )


def test_the_admin_links_a_pending_call_to_its_approval_page(staff_client, held):
    page = staff_client.get(f"/admin/held/ceremony/{held.pk}/change/").content.decode()
    assert f'href="/passkey/ceremonies/{held.token}/"' in page
