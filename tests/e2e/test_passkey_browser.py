"""The approver's side in a real Chromium with a virtual authenticator: register a passkey, open
the ceremony from the e-mail, approve (the MCPlet verifies the assertion with the host before it
runs), reject, cancel, or let it expire — in HTTPS mode (same origin) and localhost mode (a
loopback server per ceremony)."""

import os
import socket
import time
from datetime import timedelta
from urllib.parse import urlparse

import pytest
from django.utils import timezone

from held.kinds import result as held_result
from held.models import Asker

if not os.environ.get("CI"):  # in CI a missing Playwright fails the run instead
    pytest.importorskip("playwright")
from playwright.sync_api import expect  # noqa: E402

from held.models import Ceremony
from held.tasks import expire_ceremonies
from mcplet_host import gateway
from mcplet_host.authority import HOST, Authority
from passkey import loopback
from passkey.models import PasskeyCredential
from tests.browser import LAPTOP, open_tab
from tests.passkey.conftest import configure

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}
MAIL = {"to": ["sato@example.jp", "kim@example.kr"], "body": "Free dessert tomorrow!\nSee you."}


@pytest.fixture
def mailer(strict_mailer, host, eager):
    """The strict MCPlet, verifying with this host; resumes run in-process at each commit."""
    server, log = strict_mailer
    configure(server, f"{host}/auth/verify-assertion")
    return log


@pytest.fixture
def localhost_mode(host, settings, host_process):
    """Localhost mode, this test process playing the host (its live server serves the pages,
    and the loopback pages of the calls it holds)."""
    settings.PASSKEY_MODE = "localhost"
    yield
    loopback.close_all()


def register_passkey(page, host):
    page.goto(f"{host}/passkey/login/")
    page.fill("#id_username", "manager")
    page.fill("#id_password", "pw-approver-1")
    page.click("form.login button")
    page.wait_for_url(f"{host}/passkey/register/")
    page.fill("#name", "virtual key")
    # The page reloads itself after saying so: a goto meanwhile would be aborted.
    with page.expect_navigation():
        page.click("#register button")
        expect(page.locator("#status")).to_contain_text("Registered")
    assert len(page.authenticator.credentials()) == 1
    assert PasskeyCredential.objects.get().name == "virtual key"


def hold(registry, authority=HOST):
    """The dispatch agent's model proposes the e-mail (in a partner's workflow, if given)."""
    outcome = gateway.call_tool(
        registry["dispatch"],
        "mail_guests",
        MAIL,
        "app",
        authority=authority,
        proposed_by_model=True,
    )
    return outcome.ceremony


def links(mailoutbox, ceremony):
    """The links of the ceremony's e-mail: the host's page, and the loopback page if any."""
    (mail,) = mailoutbox
    return [line for line in mail.body.splitlines() if ceremony.token in line]


def assert_shows_the_call(page, asked_by="dispatch-agent’s model"):
    expect(page.locator("#agent")).to_have_text(asked_by)
    expect(page.locator("#tool")).to_contain_text("mail_guests")
    expect(page.locator(".prompt")).to_have_text("Send this e-mail?")
    arguments = page.locator("#arguments")
    for recipient in MAIL["to"]:
        expect(arguments).to_contain_text(recipient)
    expect(arguments.locator("p.text")).to_have_text(MAIL["body"])  # its line breaks kept
    expect(page.locator("#countdown")).to_contain_text("left")


def assert_clean_console(page):
    assert not [m for m in page.console_messages if "Content Security Policy" in m or "404" in m]


def wait_port_closed(url, seconds=5):
    port = urlparse(url).port
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        except OSError:
            return
        time.sleep(0.1)
    raise AssertionError(f"the loopback page on port {port} is still open")


def test_https_mode_approve_runs_the_call_the_mcplet_verified(
    page, host, approver, mailer, registry, mailoutbox
):
    register_passkey(page, host)
    ceremony = hold(registry, Authority("partner-bot", ("info-gathering-agent",)))
    (link,) = links(mailoutbox, ceremony)
    assert link == f"{host}{ceremony.get_absolute_url()}"
    page.goto(link)
    assert_shows_the_call(
        page,
        "dispatch-agent’s model, on behalf of the partner agent partner-bot, "
        "via info-gathering-agent",
    )
    page.click("#approve")
    expect(page.locator("#status")).to_contain_text("Approved", timeout=30_000)
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.EXECUTED
    assert ceremony.result["result"] == {"sent": 2} and ceremony.decided_by == approver
    assert mailer() == [{**MAIL, "verdict": "verified"}]  # the MCPlet asked the host first
    assert_clean_console(page)


def test_https_mode_reject_runs_nothing(page, host, approver, mailer, registry):
    register_passkey(page, host)
    ceremony = hold(registry)
    page.goto(f"{host}{ceremony.get_absolute_url()}")
    page.click("#reject")
    expect(page.locator("#status")).to_contain_text("Rejected: nothing ran")
    expect(page.locator("#approve")).to_have_count(0)
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.REJECTED and mailer() == []
    assert ceremony.result["error"]["code"] == "X_APPROVAL_REJECTED"


def test_a_person_runs_again_a_call_whose_outcome_is_unknown_with_a_fresh_passkey(
    page, host, approver, registry, slow_tool, calls, eager, settings
):
    """The page warns that the first attempt may have run; "Run again" opens a new approval
    of the same call, which runs once approved and sends the first attempt's idempotency key;
    the first attempt's page then shows the re-run and its outcome."""
    register_passkey(page, host)
    first = gateway.call_tool(registry["planning"], slow_tool, {"table": 4}, "app").ceremony
    assert first.approve(approver)  # resumed at the commit: sent, and no answer in time
    first.refresh_from_db()
    assert first.status == Ceremony.Status.OUTCOME_UNKNOWN
    settings.MCPLET_TOOL_TIMEOUT = 10  # this time the answer arrives

    page.goto(f"{host}{first.get_absolute_url()}")
    expect(page.locator("#status")).to_contain_text("Its outcome is unknown")
    expect(page.locator("#run-again")).to_contain_text("The first attempt may have run")
    page.click("#run-again-button")
    rerun = Ceremony.objects.get(rerun_of=first)
    page.wait_for_url(f"{host}{rerun.get_absolute_url()}")
    expect(page.locator("#rerun-of")).to_contain_text("the call whose outcome is unknown")
    assert len(calls(slow_tool)) == 1  # nothing is sent before the re-run is approved
    page.click("#approve")
    expect(page.locator("#status")).to_contain_text("Approved", timeout=30_000)

    rerun.refresh_from_db()
    assert rerun.status == Ceremony.Status.EXECUTED and rerun.decided_by == approver
    sent = calls(slow_tool)
    assert [c["meta"]["idempotencyKey"] for c in sent] == [first.token, first.token]
    page.goto(f"{host}{first.get_absolute_url()}")
    expect(page.locator("#reruns")).to_contain_text("Executed (approved by manager)")
    expect(page.locator("#run-again-button")).to_have_count(0)
    assert_clean_console(page)


def test_a_dismissed_prompt_rejects_nothing_and_the_approver_can_try_again(
    page, host, approver, mailer, registry
):
    """No passkey of this user in this browser (the prompt can only be dismissed): the page
    says so and how to register one, the call keeps waiting, and once a passkey is registered
    from that link, approving works. Then the page cannot close itself and says so."""
    register_passkey(page, host)
    ceremony = hold(registry)
    page.goto(f"{host}{ceremony.get_absolute_url()}")
    page.authenticator.clear()  # the passkey the host knows is not in this browser any more
    page.click("#approve")
    expect(page.locator("#status")).to_contain_text("still waiting", timeout=30_000)
    help_ = page.locator("#retry-help")
    expect(help_).to_be_visible()
    expect(help_).to_contain_text("no passkey registered for manager")
    expect(page.locator("#approve")).to_be_enabled()
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.PENDING and mailer() == []

    help_.get_by_role("link", name="register one here").click()
    page.wait_for_url(f"{host}/passkey/register/?next={ceremony.get_absolute_url()}")
    page.fill("#name", "this browser")
    page.click("#register button")
    page.wait_for_url(f"{host}{ceremony.get_absolute_url()}")  # back to the waiting call
    page.click("#approve")
    expect(page.locator("#status")).to_contain_text("Approved", timeout=30_000)
    expect(help_).to_be_hidden()
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.EXECUTED, ceremony.result
    assert mailer() == [{**MAIL, "verdict": "verified"}]
    # Opened by the person, not by a script: the browser refuses window.close().
    note = page.locator("#cannot-close")
    expect(note).to_be_visible(timeout=10_000)
    note.get_by_role("link", name="your passkeys").click()
    page.wait_for_url(f"{host}/passkey/register/")
    expect(page.locator(".passkeys")).to_contain_text("this browser")
    assert_clean_console(page)


PLAN = {
    "plan": {
        "summary": "A free matcha pudding for every guest of the at-risk bookings.",
        "measures": ["E-mail the guests the day before", "Lend umbrellas"],
        "targetCustomers": [
            {"name": "佐藤 花子", "email": "sato.hanako@example.jp"},
            {"name": "近藤 理恵", "email": "kondo.rie@example.jp"},
        ],
        "email": {
            "subject": "Rain tomorrow",
            "body": "{name} 様\n\nA dessert awaits you tomorrow.\n\nMori no Shokutaku",
        },
    }
}


def test_the_plan_reads_as_text_and_tables_and_every_page_leads_on(page, host, approver, registry):
    approver.is_staff = True
    approver.save()
    register_passkey(page, host)
    ceremony = held_result.hold(Asker("planning-agent"), PLAN, "Approve the plan")
    page.goto(f"{host}{ceremony.get_absolute_url()}")
    shown = page.locator("#arguments")
    customers = shown.locator("table.value")
    expect(customers.locator("thead th")).to_have_text(["name", "email"])
    expect(customers.locator("tbody tr")).to_have_count(2)
    expect(customers.locator("tbody tr").first).to_contain_text("sato.hanako@example.jp")
    body = shown.locator("p.text")
    expect(body).to_have_count(1)
    assert body.inner_text() == PLAN["plan"]["email"]["body"]  # its line breaks, as lines
    expect(shown.locator("ul.value li")).to_have_text(PLAN["plan"]["measures"])
    assert "\\n" not in shown.inner_text() and "{" not in shown.inner_text().replace("{name}", "")
    expect(page.locator("#arguments-json")).to_be_hidden()  # the exact JSON, folded away

    page.locator("#to-dashboard").click()
    page.wait_for_url(f"{host}/dashboard/")
    page.get_by_role("link", name="passkeys").click()
    page.wait_for_url(f"{host}/passkey/register/")
    page.goto(f"{host}/dashboard/approvals/")
    row = page.locator(f"#approval-{ceremony.pk}")
    expect(row.locator("table.value")).to_be_hidden()  # folded: a plan is long
    row.locator("summary").click()
    expect(row.locator("table.value tbody tr")).to_have_count(2)
    # A tab of its own: the dashboard stays.
    approval = open_tab(page, row.get_by_role("link", name="approval page").click)
    approval.wait_for_url(f"{host}{ceremony.get_absolute_url()}")
    assert page.url == f"{host}/dashboard/approvals/"
    approval.click("#reject")
    expect(approval.locator("#status")).to_contain_text("Rejected: nothing ran")
    approval.wait_for_event("close")  # done, it closes itself: the person is back on the dashboard
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.REJECTED
    assert [p for p in page.problems + approval.problems if "/ws/" not in p] == []


def test_the_plan_reads_on_a_phone(page, host, approver, registry):
    """The approver's phone: each value as wide as the screen, a table's rows as cards with
    their columns named, nothing to scroll sideways."""
    register_passkey(page, host)
    ceremony = held_result.hold(Asker("planning-agent"), PLAN, "Approve the plan")
    heights = {}
    for name, size in (("laptop", LAPTOP), ("phone", PHONE)):
        page.set_viewport_size(size)
        page.goto(f"{host}{ceremony.get_absolute_url()}")
        heights[name] = page.evaluate("document.documentElement.scrollHeight")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    body = page.locator("#arguments p.text")
    assert body.bounding_box()["width"] >= 300  # was 28 px: two characters a line
    cell = page.locator("#arguments table.value tbody tr").first.locator("td").first
    assert cell.bounding_box()["width"] >= 300
    assert page.evaluate("(td) => getComputedStyle(td, '::before').content", cell.element_handle())
    assert heights["phone"] < 2 * heights["laptop"], heights  # was 3.5 times
    expect(page.locator("#approve")).to_be_visible()
    assert page.problems == []


@pytest.mark.parametrize("mode", ["https", "localhost"])
def test_expiry_runs_nothing(page, host, approver, mailer, registry, settings, mailoutbox, mode):
    settings.PASSKEY_MODE = mode
    register_passkey(page, host)
    ceremony = hold(registry)
    ceremony.expires_at = timezone.now() + timedelta(seconds=6)  # time to open it, on a busy CI
    ceremony.save(update_fields=["expires_at"])
    if mode == "localhost":  # its page was started with the old expiry: start it anew
        loopback.close_all()
    link = loopback.serve(ceremony).url if mode == "localhost" else links(mailoutbox, ceremony)[0]
    page.goto(link)
    expect(page.locator("#status")).to_contain_text("Expired", timeout=15_000)
    expect(page.locator("#approve")).to_have_count(0)
    expire_ceremonies()
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.EXPIRED and mailer() == []
    assert ceremony.result["error"]["code"] == "X_APPROVAL_EXPIRED"
    if mode == "localhost":
        wait_port_closed(link)


def test_localhost_mode_approves_on_the_ceremonys_own_port(
    page, host, approver, mailer, registry, localhost_mode, mailoutbox
):
    register_passkey(page, host)  # on the host's own origin; rpId localhost fits every port
    ceremony = hold(registry)
    host_link, direct = links(mailoutbox, ceremony)
    assert host_link == f"{host}{ceremony.get_absolute_url()}"
    assert direct.startswith("http://localhost:") and urlparse(direct).port != urlparse(host).port
    page.goto(direct)  # signed in already: cookies of localhost are shared across ports
    assert page.url == direct
    assert_shows_the_call(page)
    page.click("#approve")
    expect(page.locator("#status")).to_contain_text("Approved", timeout=30_000)
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.EXECUTED and ceremony.result["result"]["sent"] == 2
    assert mailer() == [{**MAIL, "verdict": "verified"}]
    wait_port_closed(direct)  # released right after the delivery (§16.3)
    assert_clean_console(page)


def test_a_page_left_open_after_another_approver_decided_says_so_and_lets_go(
    page, host, approver, mailer, registry, localhost_mode, mailoutbox
):
    """Another approver rejected the call: its loopback page closed under this approver's open
    tab, whose Approve then meets no page. It says so (it stayed at "Asking for a challenge…",
    both buttons disabled, on an uncaught "Failed to fetch")."""
    register_passkey(page, host)
    ceremony = hold(registry)
    _, direct = links(mailoutbox, ceremony)
    page.goto(direct)
    assert_shows_the_call(page)
    assert Ceremony.objects.get(pk=ceremony.pk).decline(Ceremony.Status.REJECTED, approver)
    wait_port_closed(direct)
    page.click("#approve")
    expect(page.locator("#status")).to_contain_text("This page no longer answers")
    expect(page.locator("#status")).to_contain_text("Nothing was approved by you here")
    expect(page.locator("#approve")).to_be_enabled()
    expect(page.locator("#reject")).to_be_enabled()
    assert mailer() == []


def test_localhost_mode_the_host_link_leads_to_the_loopback_page(
    page, host, approver, mailer, registry, localhost_mode, mailoutbox
):
    register_passkey(page, host)
    ceremony = hold(registry)
    host_link, direct = links(mailoutbox, ceremony)
    page.goto(host_link)
    page.wait_for_url(direct)
    page.click("#reject")
    expect(page.locator("#status")).to_contain_text("Rejected")
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.REJECTED and mailer() == []
    wait_port_closed(direct)


def on_its_own_port(host):
    return lambda url: urlparse(url).port != urlparse(host).port


def test_after_a_restart_open_the_approval_page_leads_to_a_new_loopback_page(
    page, host, approver, mailer, registry, localhost_mode, mailoutbox
):
    """The host restarted (its loopback pages with it): the host's page offers to open the
    approval page, and the button leads there under the page's strict CSP, whose form-action
    would stop a redirect to another port."""
    register_passkey(page, host)
    ceremony = hold(registry)
    host_link, direct = links(mailoutbox, ceremony)
    loopback.close_all()  # what a restart does to them
    wait_port_closed(direct)

    page.goto(host_link)
    assert_shows_the_call(page)
    expect(page.locator("#approve")).to_have_count(0)  # never on the host's own port
    page.click("#open")
    page.wait_for_url(on_its_own_port(host))
    assert page.url != direct and page.url.endswith(ceremony.get_absolute_url())
    assert_shows_the_call(page)
    page.click("#approve")
    expect(page.locator("#status")).to_contain_text("Approved", timeout=30_000)
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.EXECUTED and ceremony.result["result"]["sent"] == 2
    assert mailer() == [{**MAIL, "verdict": "verified"}]
    wait_port_closed(page.url)
    assert_clean_console(page)
    assert page.problems == []


def test_signing_in_leads_on_to_the_loopback_page(
    page, host, approver, mailer, registry, localhost_mode, mailoutbox
):
    """The e-mail's link, signed out: the sign-in form, then the approval's own port (a form's
    redirects cannot leave the host's origin under its CSP: a page leads on)."""
    ceremony = hold(registry)
    host_link, direct = links(mailoutbox, ceremony)
    page.goto(host_link)
    page.wait_for_url(lambda url: url.startswith(f"{host}/passkey/login/?next="))
    page.fill("#id_username", "manager")
    page.fill("#id_password", "pw-approver-1")
    page.click("form.login button")
    page.wait_for_url(direct)
    assert_shows_the_call(page)
    page.click("#reject")
    expect(page.locator("#status")).to_contain_text("Rejected")
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.REJECTED and mailer() == []
    assert_clean_console(page)


def test_the_dashboard_opens_the_approval_page_in_a_tab_of_its_own(
    page, host, approver, mailer, registry, localhost_mode
):
    """Localhost mode: the dashboard's link opens a new tab, which goes on to the call's own
    port; once approved, that tab closes itself and the dashboard is where it was."""
    approver.is_staff = True
    approver.save()
    register_passkey(page, host)
    ceremony = hold(registry)
    page.goto(f"{host}/dashboard/approvals/")
    link = page.locator(f"#approval-{ceremony.pk}").get_by_role("link", name="approval page")
    expect(link).to_have_attribute("target", "_blank")
    expect(link).to_have_attribute("rel", "noopener")
    approval = open_tab(page, link.click)
    approval.wait_for_url(on_its_own_port(host))
    assert approval.url == loopback.live_url(ceremony.token)
    assert page.url == f"{host}/dashboard/approvals/"
    approval.click("#approve")
    expect(approval.locator("#status")).to_contain_text("Approved", timeout=30_000)
    approval.wait_for_event("close")
    ceremony.refresh_from_db()
    assert ceremony.status == Ceremony.Status.EXECUTED
    assert mailer() == [{**MAIL, "verdict": "verified"}]
    assert [p for p in page.problems + approval.problems if "/ws/" not in p] == []
