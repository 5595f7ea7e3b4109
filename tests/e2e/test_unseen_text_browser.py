"""In Chromium: an agent's arguments holding bidi controls, zero-width spaces and a lookalike
letter read on the approval page (and the dashboard's approvals) as what runs — each unseen
character a visible token, the mixed-script word flagged — under the pages' strict CSP."""

import os

import pytest

if not os.environ.get("CI"):  # in CI a missing Playwright fails the run instead
    pytest.importorskip("playwright")
from playwright.sync_api import expect  # noqa: E402

from tests.browser import use_session
from tests.passkey.conftest import hold_email
from tests.passkey.test_unseen_text import ARGUMENTS

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_approval_page_shows_unseen_characters_as_tokens(page, host, approver, registry):
    approver.is_staff = True
    approver.save()
    ceremony = hold_email(registry, ARGUMENTS)
    use_session(page, host, approver)
    page.goto(f"{host}{ceremony.get_absolute_url()}")
    shown = page.locator("#arguments")
    subject = shown.locator("tr", has=page.locator("th", has_text="subject")).locator("td")
    expect(subject).to_have_text("Refund of ⟨U+202E⟩00.001$⟨U+202C⟩ for tomorrow")
    expect(shown).to_contain_text("⟨U+200B ×3000⟩ END")
    expect(shown).to_contain_text("sato.hanako@exam⟨U+200B⟩ple.jp")
    expect(shown).to_contain_text("⟨U+202E⟩gro.live@rekcatta⟨U+202C⟩")
    for hidden in shown.locator(".hidden-char").all():
        expect(hidden).to_be_visible()  # drawn, with a size: not a zero-width nothing
    notice = shown.locator(".script-notice")
    expect(notice).to_have_count(1)
    expect(notice).to_be_visible()
    expect(notice).to_contain_text("Latin and Cyrillic letters")
    marked = shown.locator(".other-script")
    assert marked.evaluate("(n) => getComputedStyle(n).textDecorationLine") == "underline"
    page.locator("summary", has_text="As JSON").click()
    expect(page.locator("#arguments-json")).to_contain_text("Refund of \\u202e00.001$\\u202c")

    page.goto(f"{host}/dashboard/approvals/")
    row = page.locator(f"#approval-{ceremony.pk}")
    expect(row).to_contain_text("Refund of ⟨U+202E⟩00.001$⟨U+202C⟩ for tomorrow")
    expect(row.locator(".script-notice")).to_be_visible()
    assert [p for p in page.problems if "/ws/" not in p] == []
