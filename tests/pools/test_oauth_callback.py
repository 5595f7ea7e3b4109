"""The OAuth callback view against hostile and stray requests: whatever the query holds, the
answer is a redirect with a message or a 403 — never a 500 — and a code reaches only the flow
that asked for it, for the operator who started it, once."""

import pytest
from django.core.cache import cache

from pools.models import McpServer
from pools.oauth import connect

pytestmark = pytest.mark.django_db

CALLBACK = "/oauth/callback"


@pytest.fixture
def server():
    return McpServer.objects.create(
        name="tracker", transport="http", url="http://127.0.0.1:9/mcp", auth="oauth"
    )


@pytest.fixture
def flow(server):
    """A flow waiting for its authorization response, as `connect.start` leaves it."""
    flow_id = "flow-1"
    connect._update(flow_id, server=server.pk, operator="operator", url="http://as/authorize")
    cache.set(connect._state_key("st-1"), flow_id, 60)
    return flow_id


@pytest.mark.parametrize(
    "query",
    [
        "",
        "?state=unknown&code=c",
        "?state=%ED%A0%80&code=x",  # a lone surrogate, UTF-8 encoded
        "?state=" + "s" * 5000,
        "?error=access_denied",
        "?state[]=a&state[]=b",
    ],
)
def test_a_response_for_no_flow_is_sent_back_to_the_servers(staff_client, query):
    response = staff_client.get(CALLBACK + query)
    assert response.status_code == 302
    assert response["Location"] == "/admin/pools/mcpserver/"


def test_a_nul_is_refused_before_the_view(staff_client):
    assert staff_client.get(CALLBACK + "?state=%00&code=%00").status_code == 400


def test_the_code_reaches_the_flow_once_and_the_page_waits_for_its_end(
    staff_client, flow, server, monkeypatch
):
    monkeypatch.setattr("pools.oauth.views.OUTCOME_WAIT", 0.3)
    response = staff_client.get(CALLBACK + "?state=st-1&code=the-code&iss=http%3A%2F%2Fas")
    assert response.status_code == 302
    assert response["Location"] == f"/admin/pools/mcpserver/{server.pk}/change/"
    answered = connect.flow(flow)["response"]
    assert answered == {"code": "the-code", "state": "st-1", "iss": "http://as", "error": ""}
    staff_client.get(CALLBACK + "?state=st-1&code=another")  # a replay changes nothing
    assert connect.flow(flow)["response"]["code"] == "the-code"


def test_an_error_response_is_passed_on_as_one_line(staff_client, flow, monkeypatch):
    monkeypatch.setattr("pools.oauth.views.OUTCOME_WAIT", 0.1)
    staff_client.get(CALLBACK + "?state=st-1&error=access_denied&error_description=No%0Athanks")
    assert connect.flow(flow)["response"]["error"] == "access_denied (No\nthanks)"


def test_another_operator_cannot_finish_the_flow(client, flow, django_user_model):
    other = django_user_model.objects.create_superuser("mallory", "m@example.org", "pw-m-1")
    client.force_login(other)
    assert client.get(CALLBACK + "?state=st-1&code=stolen").status_code == 403
    assert "response" not in connect.flow(flow)


def test_the_callback_wants_a_signed_in_operator(client, flow):
    response = client.get(CALLBACK + "?state=st-1&code=c")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert "response" not in connect.flow(flow)
