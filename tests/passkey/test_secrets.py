"""§16.3: assertions are never logged and never persisted — not in the database, not in the
audit trail — beyond the injection into the one tool call."""

import logging

import pytest
from django.core.cache import cache
from django.db import connection
from webauthn.helpers import base64url_to_bytes

from held import lifecycle
from held.models import Ceremony
from mcplet_host.models import AuditEvent
from tests.passkey.conftest import post_assertion, sign

pytestmark = pytest.mark.django_db


def every_cell():
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')  # noqa: S608 (names from introspection)
            for row in cursor.fetchall():
                for cell in row:
                    yield table, cell


def test_no_trace_of_the_assertion_after_a_full_approval(
    approver_client, authenticator, held, calls, client, verify_token, caplog
):
    caplog.set_level(logging.DEBUG)
    credential = sign(approver_client, held, authenticator)
    assert post_assertion(approver_client, held, credential).status_code == 200
    auth = cache.get(held.assertion_key)
    verdict = client.post(
        "/auth/verify-assertion",
        {"mcplet_auth": auth, "tool": "send_email", "arguments": held.arguments},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {verify_token}",
    )
    assert verdict.json() == {"verified": True}
    lifecycle.resume(held.pk)
    held.refresh_from_db()
    assert held.status == Ceremony.Status.EXECUTED
    assert calls("send_email")[0]["meta"]["mcplet_auth"]["signature"] == auth["signature"]

    signature = auth["signature"]
    raw = base64url_to_bytes(signature)
    secrets = (signature, raw.hex(), auth["clientDataJSON"], auth["authenticatorData"])
    # Logs.
    for secret in secrets:
        assert secret not in caplog.text
    # Every table, every cell (text, JSON or bytes).
    checked = 0
    for table, cell in every_cell():
        checked += 1
        if isinstance(cell, bytes | memoryview):
            assert raw not in bytes(cell), table
        else:
            assert not any(secret in str(cell) for secret in secrets), table
    assert checked > 100
    # The audit trail says who approved what, and when — and nothing of the assertion.
    granted = AuditEvent.objects.get(event_type="PERMISSION_GRANTED")
    assert granted.actor_id == "manager" and granted.target_tool == "send_email"
    assert granted.timestamp is not None
    for event in AuditEvent.objects.all():
        assert not any(secret in str(event.as_mgp()) for secret in secrets)
    # And the cache let go of it once it was injected.
    assert cache.get(held.assertion_key) is None
