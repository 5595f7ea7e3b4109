import hashlib
import hmac
from datetime import timedelta

import pytest
from django.utils import timezone

from a2a.models import PartnerKey
from agents.models import Agent

pytestmark = pytest.mark.django_db


@pytest.fixture
def partner():
    return Agent.objects.create(
        agent_id="partner-bot", display_name="Partner", kind=Agent.Kind.EXTERNAL
    )


def test_only_a_hash_is_stored(partner):
    key, raw = PartnerKey.issue(partner, "production")
    row = PartnerKey.objects.filter(pk=key.pk).values().get()
    assert raw not in {str(v) for v in row.values()}
    assert row["key_hash"] == hashlib.sha256(raw.encode()).hexdigest()
    assert raw.startswith(row["prefix"]) and len(row["prefix"]) < len(raw) // 3


def test_authenticates_with_a_constant_time_comparison(partner, monkeypatch):
    key, raw = PartnerKey.issue(partner, "production")
    compared = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append((a, b)) or real(a, b))
    assert PartnerKey.authenticate(raw) == key
    assert compared == [(key.key_hash, hashlib.sha256(raw.encode()).hexdigest())]
    key.refresh_from_db()
    assert key.last_used_at is not None


def test_wrong_secret_with_a_right_prefix_fails(partner):
    key, raw = PartnerKey.issue(partner, "production")
    forged = raw[:-4] + ("AAAA" if not raw.endswith("AAAA") else "BBBB")
    assert PartnerKey.authenticate(forged) is None
    assert PartnerKey.authenticate("") is None
    assert PartnerKey.authenticate("Bearer " + raw) is None


def test_revoked_and_expired_keys_fail(partner):
    revoked, raw_revoked = PartnerKey.issue(partner, "old")
    revoked.revoke()
    expired, raw_expired = PartnerKey.issue(
        partner, "trial", expires_at=timezone.now() - timedelta(minutes=1)
    )
    assert PartnerKey.authenticate(raw_revoked) is None
    assert PartnerKey.authenticate(raw_expired) is None
    assert (revoked.state, expired.state) == ("revoked", "expired")


def test_admin_shows_the_key_once(staff_client, partner):
    response = staff_client.post(
        "/admin/a2a/partnerkey/add/",
        {"agent": partner.pk, "name": "production", "expires_at_0": "", "expires_at_1": ""},
    )
    assert response.status_code == 200
    key = PartnerKey.objects.get()
    raw = response.context["raw"]
    assert PartnerKey.authenticate(raw) == key
    assert raw.encode() in response.content and b"shown only once" in response.content
    listing = staff_client.get("/admin/a2a/partnerkey/")
    detail = staff_client.get(f"/admin/a2a/partnerkey/{key.pk}/change/")
    for page in (listing, detail):
        assert key.prefix.encode() in page.content and raw.encode() not in page.content


def test_admin_revokes(staff_client, partner):
    key, raw = PartnerKey.issue(partner, "production")
    staff_client.post(
        "/admin/a2a/partnerkey/", {"action": "revoke_selected", "_selected_action": [key.pk]}
    )
    assert PartnerKey.authenticate(raw) is None
