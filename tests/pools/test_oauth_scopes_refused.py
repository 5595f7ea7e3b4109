"""Scopes a server asked for (403 insufficient_scope) that its authorization server then
refuses (invalid_scope) are dropped by the connect that met the refusal: the next Reconnect…
asks for the configured scopes alone and succeeds (it failed the same way, for good, until a
Disconnect)."""

import pytest

from mcplet_host.models import AuditEvent
from mcplets.examples.oauth_protected import serve
from pools.oauth.models import OAuthGrant
from tests.pools.oauth_helpers import connect_server
from tests.pools.test_oauth_grants import register

pytestmark = pytest.mark.django_db(transaction=True)


def test_refused_asked_scopes_are_dropped_and_the_next_connect_succeeds(tmp_path):
    with serve(calls_log=tmp_path / "calls.jsonl") as base:
        server = register(base)
        assert connect_server(server)["ok"]
        OAuthGrant.objects.filter(server=server).update(asked_scopes="audit:read")

        refused = connect_server(server)
        assert not refused["ok"]
        assert "invalid_scope" in refused["message"]
        assert "(audit:read) are dropped" in refused["message"]
        grant = OAuthGrant.objects.get(server=server)
        assert grant.asked_scopes == "" and "audit:read" in grant.problem
        assert grant.usable  # the grant it had still works
        event = AuditEvent.objects.get(event_type="server.oauth.scopes_refused")
        assert (event.actor_id, event.details["dropped"]) == ("operator", "audit:read")

        again = connect_server(server)
        assert again["ok"], again


def test_a_refusal_of_the_configured_scope_drops_nothing(tmp_path):
    with serve(calls_log=tmp_path / "calls.jsonl") as base:
        server = register(base)
        server.oauth_scope = "audit:read"
        server.save()
        refused = connect_server(server)
        assert not refused["ok"] and "invalid_scope" in refused["message"]
        assert "dropped" not in refused["message"]
        assert not AuditEvent.objects.filter(event_type="server.oauth.scopes_refused").exists()
