"""The README's Walkthrough in Chromium, step by step, for any running host (`make run`'s
runhost, or daphne + a worker): what the operator does in the browser, and what they see."""

from pathlib import Path
from urllib.parse import urlparse

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect

from tests.browser import close_tab, open_tab, screenshot
from tests.restaurant.test_reference_script import SCRIPT, SCRIPT_API_URL


def reference_scripts(folder, backend_url):
    """The reference script, fetching the forecast from this backing service (for
    MCPLET_SCRIPT_DIRS); the folder."""
    text = SCRIPT.read_text(encoding="utf-8").replace(SCRIPT_API_URL, backend_url)
    (Path(folder) / "reference.yaml").write_text(text, encoding="utf-8")
    return str(folder)


def register_passkey(page, host):
    """Step 2: register a passkey on the host's own page."""
    page.goto(f"{host}/passkey/register/")
    page.fill("#name", "store phone")
    screenshot(page, "walkthrough-1-register-passkey")
    # The page reloads itself after saying so: a goto meanwhile would be aborted.
    with page.expect_navigation():
        page.click("#register button")
        expect(page.locator("#status")).to_contain_text("Registered")


def run_director(page, host):
    """Step 3: Control › Run Director now; the cycle's outcome arrives live."""
    page.goto(f"{host}/dashboard/control/")
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    page.get_by_role("button", name="Run Director now").click()
    expect(page.locator('[data-director-result="director"] .badge')).to_have_text("ran")
    screenshot(page, "walkthrough-2-run-director")


def approve_from_the_dashboard(page, host, tool, shows, picture):
    """Approvals → the pending call's page, in a tab of its own → (its loopback port) →
    Approve with the passkey. The dashboard stays where it was."""
    page.goto(f"{host}/dashboard/approvals/")
    row = page.locator('[data-live="approvals"][data-only="pending"] tr', has_text=tool)
    expect(row).to_contain_text("waiting for approval")  # arrives live when the worker asks
    screenshot(page, f"{picture}-pending")
    approval = open_tab(page, row.get_by_role("link", name="approval page").click)
    to_its_own_port(approval, host)
    for words in shows:
        expect(approval.locator("main")).to_contain_text(words)
    screenshot(approval, picture)
    approval.click("#approve")
    expect(approval.locator("#status")).to_contain_text("Approved")
    assert page.url == f"{host}/dashboard/approvals/"
    close_tab(approval, back_to=page)


def to_its_own_port(tab, host):
    """In localhost mode the host's page leads on to the call's own loopback port: at once when
    the host holds its page open (runhost), after "Open the approval page" when a separate
    worker held the call."""
    on_the_host = urlparse(host).port
    tab.wait_for_url(lambda url: "/passkey/ceremonies/" in url)
    for _ in range(300):
        if urlparse(tab.url).port != on_the_host:
            break
        try:
            if tab.locator("#open").count():
                tab.click("#open")
                break
        except PlaywrightError:
            pass  # the page is leading on by itself: its document went away
        tab.wait_for_timeout(100)
    tab.wait_for_url(lambda url: urlparse(url).port != on_the_host)


def approve_the_plan(page, host, guests):
    """Step 4: the planning agent's plan, with the guests at risk."""
    approve_from_the_dashboard(
        page,
        host,
        "planning-agent",
        ["キャンペーン計画を承認してください", guests[0]["name"]],
        "walkthrough-3-approve-plan",
    )


def approve_the_emails(page, host, guests):
    """Step 5: send_email, its recipients on the page; then it runs (Executed, live)."""
    approve_from_the_dashboard(
        page,
        host,
        "send_email",
        ["メール送信を承認してください", guests[0]["email"]],
        "walkthrough-4-approve-emails",
    )
    page.goto(f"{host}/dashboard/approvals/")
    done = page.locator('[data-live="approvals"][data-only="decided"] tr', has_text="send_email")
    expect(done).to_contain_text("Executed")  # when the MCPlet has answered, live
