import pytest

from mcplet_host import audit
from mcplet_host.models import AuditEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def event():
    return audit.record(
        audit.EventType.TOOL_BLOCKED,
        actor_id="planning-agent",
        target_tool="send_email",
        result=audit.BLOCKED,
        details={"rule": "pool"},
    )


def test_list_filters_and_shows_events(staff_client, event):
    response = staff_client.get("/admin/mcplet_host/auditevent/?event_type=TOOL_BLOCKED")
    assert response.status_code == 200
    assert b"send_email" in response.content and b"planning-agent" in response.content


def test_detail_is_read_only(staff_client, event):
    url = f"/admin/mcplet_host/auditevent/{event.pk}/change/"
    page = staff_client.get(url)
    assert page.status_code == 200
    assert b'name="result"' not in page.content  # no editable inputs
    assert staff_client.post(url, {"result": "SUCCESS"}).status_code == 403
    assert AuditEvent.objects.get(pk=event.pk).result == audit.BLOCKED


def test_no_add_or_delete(staff_client, event):
    assert staff_client.get("/admin/mcplet_host/auditevent/add/").status_code == 403
    assert (
        staff_client.post(
            f"/admin/mcplet_host/auditevent/{event.pk}/delete/", {"post": "yes"}
        ).status_code
        == 403
    )
    response = staff_client.post(
        "/admin/mcplet_host/auditevent/",
        {"action": "delete_selected", "_selected_action": [event.pk], "post": "yes"},
    )
    assert AuditEvent.objects.filter(pk=event.pk).exists()
    assert response.status_code in (200, 302)
    assert audit.verify_chain() == (AuditEvent.objects.count(), None)
