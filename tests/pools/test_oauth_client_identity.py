"""How the host identifies itself to an authorization server: by its Client ID Metadata
Document when its origin is https and the server supports CIMD (no registration), else by
dynamic registration."""

import pytest
from django.test import Client
from django.urls import reverse

from agents.models import Agent
from mcplet_host import gateway
from mcplets.examples.oauth_protected import serve
from pools.models import McpServer
from pools.oauth import views
from pools.oauth.models import OAuthGrant
from tests.conftest import Calls
from tests.mcplets.test_oauth_cimd import Documents
from tests.pools.oauth_helpers import connect_server

pytestmark = pytest.mark.django_db(transaction=True)


def register(base):
    return McpServer.objects.create(
        name="tracker", transport="http", url=f"{base}/mcp", auth=McpServer.Auth.OAUTH
    )


def test_the_hosts_document_names_its_own_url_and_callback(settings):
    settings.PASSKEY_ORIGIN = "https://host.example"
    document = Client().get(reverse("oauth-client-metadata")).json()
    assert document["client_id"] == "https://host.example/oauth/client-metadata.json"
    assert document["redirect_uris"] == ["https://host.example/oauth/callback"]
    assert document["token_endpoint_auth_method"] == "none"  # a public client: PKCE
    assert views.client_metadata_url() == document["client_id"]
    settings.PASSKEY_ORIGIN = "http://localhost:8000"  # only https can be a client id
    assert views.client_metadata_url() is None


def test_an_https_host_is_known_by_its_document_and_not_registered(settings, tmp_path):
    calls = Calls(tmp_path / "calls.jsonl")
    with Documents(tmp_path).serving() as documents:
        settings.PASSKEY_ORIGIN = documents.base  # the host's origin, as the server sees it
        path = reverse("oauth-client-metadata")
        documents.documents[path] = Client().get(path).json()  # the host's own document
        with serve(calls_log=calls.path, cimd=True, cimd_ca=documents.cert) as base:
            server = register(base)
            outcome = connect_server(
                server,
                redirect_uri=views.redirect_uri(),
                client_metadata_url=views.client_metadata_url(),
            )
            assert outcome["ok"], outcome
            grant = OAuthGrant.objects.get(server=server)
            assert grant.client_id == f"{documents.base}{path}"
            assert "client_secret" not in grant.secret["client"]
            assert path in documents.fetched
            agent = Agent.objects.create(agent_id="reader", display_name="Reader")
            assert gateway.call_tool(agent, "whoami", {}).status == "executed"
    assert calls("whoami")[0]["subject"] == grant.client_id


def test_an_http_host_registers_itself_once(tmp_path):
    with serve() as base:
        server = register(base)
        assert connect_server(server)["ok"]
        first = OAuthGrant.objects.get(server=server).client_id
        assert connect_server(server)["ok"]  # Reconnect…: the client registered is kept
    grant = OAuthGrant.objects.get(server=server)
    assert grant.client_id == first
    client = grant.secret["client"]
    assert client["client_id"] == grant.client_id and client["client_secret"]
    assert client["client_name"] == "MCPlet Host"
    assert client["redirect_uris"] == ["http://localhost/oauth/callback"]
