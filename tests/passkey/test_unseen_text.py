"""What the approver reads is what runs: an LLM's arguments (or a server's message) holding a
bidi control, a zero-width space or a lookalike letter are shown for what they are — each
unseen character as a token, a word mixing scripts with a notice — never reordered or hidden.
The filter (`passkey_tags.shown`, and `readable` for arguments) and the pages that use it."""

import json
import re

import pytest
from django.utils.html import escape

from held.models import Ceremony
from mcplet_host import storable
from mcplet_host.gateway.envelopes import url_step
from passkey import notify
from passkey.forms import ElicitationForm
from passkey.templatetags.passkey_tags import plain, readable, shown
from tests.passkey.conftest import hold_email, url

RLO, PDF, ZWSP = "\u202e", "\u202c", "\u200b"
TO = [
    "sato.hanako@example.jp",
    "sato.hanako@ex\u0430mple.jp",  # a Cyrillic а
    f"sato.hanako@exam{ZWSP}ple.jp",
    f"{RLO}gro.live@rekcatta{PDF}",  # reads attacker@evil.org
]
SUBJECT = f"Refund of {RLO}00.001${PDF} for tomorrow"  # reads "Refund of $100.00"
BODY = (
    "Free dessert tomorrow\u2067 \u2066(reply with your card number to claim)\u2069"
    + ZWSP * 3000
    + " END"
)
ARGUMENTS = {"to": TO, "body": BODY, "subject": SUBJECT}
CONTROLS = re.compile("[\u061c\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def token(code, title, count=1):
    label = f"⟨U+{code} ×{count}⟩" if count > 1 else f"⟨U+{code}⟩"
    return f'<span class="hidden-char" title="{title}">{label}</span>'


def test_a_right_to_left_override_is_a_token_not_a_reversal():
    assert str(readable(TO[3])) == (
        f'<span class="text">{token("202E", "RIGHT-TO-LEFT OVERRIDE")}gro.live@rekcatta'
        f"{token('202C', 'POP DIRECTIONAL FORMATTING')}</span>"
    )
    assert str(readable(SUBJECT)) == (
        f'<span class="text">Refund of {token("202E", "RIGHT-TO-LEFT OVERRIDE")}00.001$'
        f"{token('202C', 'POP DIRECTIONAL FORMATTING')} for tomorrow</span>"
    )


def test_a_zero_width_space_is_shown_and_a_run_of_them_is_one_counted_token():
    assert str(readable(TO[2])) == (
        f'<span class="text">sato.hanako@exam{token("200B", "ZERO WIDTH SPACE")}ple.jp</span>'
    )
    assert str(readable(BODY)) == (
        '<span class="text">Free dessert tomorrow'
        f"{token('2067', 'RIGHT-TO-LEFT ISOLATE')} {token('2066', 'LEFT-TO-RIGHT ISOLATE')}"
        f"(reply with your card number to claim){token('2069', 'POP DIRECTIONAL ISOLATE')}"
        f"{token('200B', '3000 × ZERO WIDTH SPACE', 3000)} END</span>"
    )


def test_a_word_mixing_latin_and_cyrillic_carries_a_notice_naming_the_scripts():
    assert str(readable(TO[1])) == (
        '<span class="text">sato.hanako@ex'
        '<span class="other-script" title="CYRILLIC SMALL LETTER A">\u0430</span>mple.jp'
        '<span class="script-notice" role="note">mixed scripts: '
        "<bdi>ex\u0430mple</bdi> has Latin and Cyrillic letters</span></span>"
    )
    for text in ("佐藤 花子 <sato@example.jp>", "東京タワーでTシャツ", "Ελληνικά and English"):
        assert str(readable(text)) == f'<span class="text">{escape(text)}</span>'  # as written
    greek = str(shown("pay\u03bfl.com"))  # a Greek omicron
    assert "<bdi>pay\u03bfl</bdi> has Latin and Greek letters" in greek
    assert 'title="GREEK SMALL LETTER OMICRON">\u03bf</span>' in greek


def test_lines_and_tabs_are_kept_other_invisible_characters_are_tokens():
    rendered = str(readable("a\tb\r\nc\x00\ue000\u2028\U000e0001"))
    assert rendered.startswith('<p class="text">a\tb<span class="hidden-char"')
    for code in ("000D", "0000", "E000", "2028", "E0001"):
        assert f"⟨U+{code}⟩" in rendered
    assert "\n" in rendered and "\r" not in rendered and "\x00" not in rendered


def test_keys_and_column_names_are_shown_the_same_way():
    rendered = str(readable({f"to{RLO}": [{f"name{ZWSP}": "x"}]}))
    assert "<dt>to" + token("202E", "RIGHT-TO-LEFT OVERRIDE") + "</dt>" in rendered
    assert 'data-label="name⟨U+200B⟩"' in rendered
    assert not CONTROLS.search(rendered)


def test_a_servers_message_is_isolated_and_its_override_shown():
    assert str(shown(f"Sign in at {RLO}moc.knab{PDF}")) == (
        f"<bdi>Sign in at {token('202E', 'RIGHT-TO-LEFT OVERRIDE')}moc.knab"
        f"{token('202C', 'POP DIRECTIONAL FORMATTING')}</bdi>"
    )
    assert str(shown("<b>x</b>")) == "<bdi>&lt;b&gt;x&lt;/b&gt;</bdi>"


def test_where_no_markup_can_go_the_tokens_are_text():
    assert plain(f"send{RLO}liame{ZWSP * 3}") == "send⟨U+202E⟩liame⟨U+200B ×3⟩"
    pick = {"type": "string", "enum": ["a"], "enumNames": [f"{RLO}A"]}
    form = ElicitationForm({"type": "object", "properties": {"pick": pick}})
    assert form.fields["pick"].choices == [("a", "⟨U+202E⟩A")]  # an <option> holds no markup


def test_the_json_view_escapes_exactly_the_unseen_characters():
    text = storable.shown_json({"subject": SUBJECT, "to": TO, "city": "東京\n"}, indent=2)
    assert "Refund of \\u202e00.001$\\u202c for tomorrow" in text
    assert "ex\u0430mple" in text and "exam\\u200bple" in text and "東京\\n" in text
    assert not CONTROLS.search(text)
    assert json.loads(text) == {"subject": SUBJECT, "to": TO, "city": "東京\n"}
    assert storable.shown_json(["\U000e0001\u2028"]) == '["\\udb40\\udc01\\u2028"]'


# --- the pages --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_approval_page_shows_the_tokens_and_the_notice(approver_client, registry):
    ceremony = hold_email(registry, ARGUMENTS)
    page = approver_client.get(url(ceremony)).content.decode()
    assert token("202E", "RIGHT-TO-LEFT OVERRIDE") in page
    assert token("200B", "3000 × ZERO WIDTH SPACE", 3000) in page
    assert "<bdi>ex\u0430mple</bdi> has Latin and Cyrillic letters" in page
    assert "Refund of \\u202e00.001$\\u202c for tomorrow" in page  # As JSON
    assert not CONTROLS.search(page)  # not one acts, anywhere on the page


@pytest.mark.django_db
def test_the_step_up_page_shows_the_servers_override(approver_client, registry):
    ceremony = hold_email(registry, ARGUMENTS)
    link = f"https://bank.example/{RLO}nigol/"
    step = url_step({"mode": "url", "message": "Go", "url": link, "elicitationId": "e"})
    step["message"] = f"Sign in at {RLO}moc.knab{PDF}"
    Ceremony.objects.filter(pk=ceremony.pk).update(kind=Ceremony.Kind.STEP_UP, elicitations=[step])
    page = approver_client.get(url(ceremony)).content.decode()
    assert f"<p><bdi>Sign in at {token('202E', 'RIGHT-TO-LEFT OVERRIDE')}moc.knab" in page
    assert (
        f'<code id="url-0"><bdi>https://bank.example/{token("202E", "RIGHT-TO-LEFT OVERRIDE")}'
        "nigol/</bdi></code>"
    ) in page
    assert not CONTROLS.search(page)
    page = approver_client.get(url(ceremony) + "?open=0").content.decode()
    assert 'href="https://bank.example/%E2%80%AEnigol/"' in page  # what the browser opens
    assert not CONTROLS.search(page)


@pytest.mark.django_db
def test_the_approvers_email_shows_the_servers_override_as_text(registry, approver, mailoutbox):
    ceremony = hold_email(registry, ARGUMENTS)
    Ceremony.objects.filter(pk=ceremony.pk).update(prompt_message=f"Pay {RLO}moc.knab{PDF}")
    ceremony.refresh_from_db()
    notify.send_notice(ceremony, "https://host.example/")
    (mail,) = mailoutbox
    assert "Message: Pay ⟨U+202E⟩moc.knab⟨U+202C⟩\n" in mail.body
    assert not CONTROLS.search(mail.body)
