"""A NUL character in a page's path or query (PostgreSQL refuses NUL in text): a 400 and an
audit event on every page, never a 500 (issue 14, reproduction 5). A Host header the server does
not serve: the same."""

import pytest

from mcplet_host.models import AuditEvent

pytestmark = pytest.mark.django_db

PATHS = [
    "/dashboard/?q=%00",
    "/dashboard/mcplets/?status=%00&server=%00",
    "/dashboard/runs/?agent=%00",
    "/dashboard/audit/?actor=%00&tool=%00",
    "/dashboard/audit/export.jsonl?trace=%00",
    "/dashboard/approvals/?page=%00",
    "/passkey/ceremonies/%00/",
    "/passkey/ceremonies/abc%00def/open/",
    "/passkey/login/?next=%00",
    "/admin/pools/pool/?q=%00",
    "/admin/agents/agent/%00/change/",
    "/admin/mcplet_host/auditevent/?actor_id=%00",
    "/a2a/tasks/%00",
    "/%00",
    "/dashboard/?%00=1",
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("who", ["anonymous", "operator"])
def test_a_nul_in_the_path_or_query_is_400_and_audited(client, admin_user, path, who):
    if who == "operator":
        client.force_login(admin_user)
    client.raise_request_exception = False
    response = client.get(path)
    assert response.status_code == 400
    event = AuditEvent.objects.get(event_type="http.request.refused")
    details = event.details
    assert event.result == "BLOCKED" and ("\\x00" in details["path"] or "%00" in details["query"])
    assert event.actor_id == ("admin" if who == "operator" else "")


def test_an_a2a_client_gets_the_a2a_error_shape(client):
    response = client.post("/a2a/tasks?x=%00", {}, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "VALIDATION_ERROR"


@pytest.mark.parametrize(
    ("path", "kind"), [("/a2a/agents", "application/json"), ("/dashboard/", "text/plain")]
)
def test_a_host_the_server_does_not_serve_is_400_and_audited(client, path, kind):
    response = client.get(path, HTTP_HOST="5", HTTP_AUTHORIZATION="Bearer mcpk_x")
    assert response.status_code == 400 and response["Content-Type"].startswith(kind)
    if kind == "application/json":
        assert response.json()["error"]["code"] == "VALIDATION_ERROR"
    event = AuditEvent.objects.get(event_type="http.request.refused")
    assert event.result == "BLOCKED" and event.details["path"] == path
    assert event.details["reason"] == "a Host header this server does not serve"
    assert not AuditEvent.objects.filter(event_type="a2a.partner.request").exists()  # no view


@pytest.mark.parametrize(
    "host",
    [
        "testserver\x00",
        "testserver\\@evil.example",
        "evil.example\\testserver",
        "\udcff",
        "testserver:1e400",
        "[" * 200,
        "testserver:8000:80",
    ],
)
def test_a_hostile_host_is_refused_the_same_way(client, host):
    response = client.get("/a2a/agents", HTTP_HOST=host)
    assert response.status_code == 400 and response.json()["error"]["code"] == "VALIDATION_ERROR"
    event = AuditEvent.objects.get(event_type="http.request.refused")
    assert event.details["reason"] == "a Host header this server does not serve"
