"""The dashboard's approvals list shows an agent's arguments as the approval page does: each
unseen character as a token, a word mixing scripts with a notice (tests/passkey/
test_unseen_text.py has the filter's own tests)."""

import pytest
from django.urls import reverse

from held.models import Ceremony
from tests.passkey.conftest import hold_email
from tests.passkey.test_unseen_text import ARGUMENTS, CONTROLS, RLO, token

pytestmark = pytest.mark.django_db


def test_the_approvals_list_shows_the_tokens_and_the_notice(staff_client, registry):
    pending = hold_email(registry, ARGUMENTS)
    decided = hold_email(registry, ARGUMENTS)
    Ceremony.objects.filter(pk=decided.pk).update(
        status=Ceremony.Status.FAILED,
        result={"error": {"code": "UNKNOWN_ERROR", "message": f"refused {RLO}gro.live"}},
    )
    Ceremony.objects.filter(pk=pending.pk).update(prompt_message=f"Send {RLO}lanif")
    page = staff_client.get(reverse("dashboard:approvals")).content.decode()
    for ceremony in (pending, decided):
        row = page.split(f'id="approval-{ceremony.pk}"')[1].split("</tr>")[0]
        assert token("202E", "RIGHT-TO-LEFT OVERRIDE") in row
        assert token("200B", "3000 × ZERO WIDTH SPACE", 3000) in row
        assert "<bdi>ex\u0430mple</bdi> has Latin and Cyrillic letters" in row
    assert f"refused {token('202E', 'RIGHT-TO-LEFT OVERRIDE')}gro.live" in page
    assert f"<bdi>Send {token('202E', 'RIGHT-TO-LEFT OVERRIDE')}lanif</bdi>" in page
    assert not CONTROLS.search(page)
