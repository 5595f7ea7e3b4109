import pytest
from django.contrib.auth.models import Group, Permission

from held.models import Ceremony
from mcplet_host.models import AuditEvent
from passkey.models import PasskeyCredential
from tests.passkey.authenticator import SoftAuthenticator
from tests.passkey.conftest import ORIGIN, make_approver, register

pytestmark = pytest.mark.django_db


def test_the_page_needs_a_sign_in(client):
    response = client.get("/passkey/register/")
    assert response.status_code == 302
    assert response["Location"] == "/passkey/login/?next=/passkey/register/"


def test_the_sign_in_page_leads_back(client, approver):
    response = client.post(
        "/passkey/login/?next=/passkey/register/",
        {"username": "manager", "password": "pw-approver-1", "next": "/passkey/register/"},
    )
    assert response.status_code == 302 and response["Location"] == "/passkey/register/"
    assert client.get("/passkey/register/").status_code == 200


def test_non_approvers_get_a_clear_403(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("cook", "cook@example.org", "pw"))
    page = client.get("/passkey/register/")
    assert page.status_code == 403
    assert b"You are not an approver" in page.content and b"cook" in page.content
    options = client.post("/passkey/register/options/")
    assert options.status_code == 403 and options.json()["reason"] == "not_an_approver"


def test_a_group_permission_is_enough(client, django_user_model):
    group = Group.objects.create(name="managers")
    group.permissions.add(Permission.objects.get(codename="approve_ceremony"))
    user = django_user_model.objects.create_user("vice", "vice@example.org", "pw")
    user.groups.add(group)
    client.force_login(user)
    register(client, SoftAuthenticator(), "phone")
    assert PasskeyCredential.objects.get().user == user


def test_an_approver_holds_several_named_passkeys_and_approves_nothing(
    approver_client, approver, held
):
    laptop, phone = SoftAuthenticator(), SoftAuthenticator()
    register(approver_client, laptop, "laptop")
    register(approver_client, phone, "phone")

    passkeys = {p.name: p for p in PasskeyCredential.objects.filter(user=approver)}
    assert set(passkeys) == {"laptop", "phone"}
    assert passkeys["laptop"].credential_id == laptop.id
    assert passkeys["laptop"].sign_count == 1 and passkeys["laptop"].transports == ["internal"]
    page = approver_client.get("/passkey/register/").content.decode()
    assert "laptop" in page and "phone" in page
    # §7.2 Phase 3: registration alone authorises nothing.
    held.refresh_from_db()
    assert held.status == Ceremony.Status.PENDING
    assert not AuditEvent.objects.filter(event_type="PERMISSION_GRANTED").exists()
    assert AuditEvent.objects.filter(event_type="mcplet.passkey.registered").count() == 2


def test_the_user_handle_is_opaque_and_stable(approver, django_user_model):
    handle = PasskeyCredential.user_handle(approver)
    assert handle == PasskeyCredential.user_handle(approver) and len(handle) == 32
    assert approver.get_username().encode() not in handle
    other = make_approver(django_user_model, "second", "second@example.org")
    assert PasskeyCredential.user_handle(other) != handle


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        ("origin", "bad_signature"),  # registration made on another origin
        ("replay", "unknown_challenge"),  # a registration challenge is used once
        ("no_uv", "bad_signature"),  # the authenticator did not verify the user
    ],
)
def test_registration_refusals(approver_client, tamper, reason):
    key = SoftAuthenticator(user_verified=tamper != "no_uv")
    options = approver_client.post("/passkey/register/options/").json()
    credential = key.create(options, "https://evil.example" if tamper == "origin" else ORIGIN)
    body = {"name": "k", "credential": credential}
    if tamper == "replay":
        first = approver_client.post("/passkey/register/verify/", body, "application/json")
        assert first.status_code == 201
    response = approver_client.post("/passkey/register/verify/", body, "application/json")
    assert response.status_code == 400 and response.json()["reason"] == reason
    assert PasskeyCredential.objects.count() == (1 if tamper == "replay" else 0)
    refused = AuditEvent.objects.get(event_type="mcplet.passkey.refused")
    assert (refused.actor_id, refused.details) == (
        "manager",
        {"stage": "register", "reason": reason},
    )


@pytest.mark.parametrize(
    "body",
    [
        "{}",
        '{"name": "x"}',
        "not json",
        '{"name": "a\\u0000b", "credential": {}}',  # NUL: no body the host can store
        '{"name": "k", "credential": "\\ud800"}',
        '{"name": 5, "credential": {}}',
        '{"name": "k", "credential": []}',
        "[]",
    ],
)
def test_a_body_that_is_no_registration_is_refused_and_audited(approver_client, body):
    approver_client.post("/passkey/register/options/")
    response = approver_client.post("/passkey/register/verify/", body, "application/json")
    assert response.status_code == 400 and response.json()["reason"] == "malformed"
    assert not PasskeyCredential.objects.exists()
    refused = AuditEvent.objects.get(event_type="mcplet.passkey.refused")
    assert refused.details == {"stage": "register", "reason": "malformed"}


def test_admin_lists_and_revokes_passkeys(staff_client, approver_client, approver, held):
    register(approver_client, SoftAuthenticator(), "laptop")
    passkey = PasskeyCredential.objects.get()
    listing = staff_client.get("/admin/passkey/passkeycredential/").content.decode()
    assert "laptop" in listing and "active" in listing
    assert staff_client.get("/admin/passkey/passkeycredential/add/").status_code == 403
    staff_client.post(
        "/admin/passkey/passkeycredential/",
        {"action": "revoke", "_selected_action": [passkey.pk]},
    )
    passkey.refresh_from_db()
    assert passkey.revoked_at is not None and passkey.state == "revoked"
    revoked = AuditEvent.objects.get(event_type="mcplet.passkey.revoked")
    assert revoked.actor_id == "operator" and revoked.details["owner"] == "manager"
    # A revoked passkey is no passkey: nothing to approve with.
    response = approver_client.post(f"/passkey/ceremonies/{held.token}/challenge/")
    assert response.status_code == 409 and response.json()["reason"] == "no_passkey"
