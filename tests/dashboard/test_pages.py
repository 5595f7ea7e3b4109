"""The dashboard's pages through Django's test client: staff only, a strict CSP, the scenario's
data on each page, useful empty states, filters and pagination."""

import html
import json
import re

import pytest
from django.urls import reverse

from mcplet_host import audit
from mcplet_host.models import AuditEvent

PAGES = ["overview", "mcplets", "agents", "runs", "approvals", "audit", "control"]
CSP = (
    "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; frame-ancestors 'none'"
)


def text(response):
    """The page's text without tags or extra spaces, for readable assertions."""
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode())))


@pytest.mark.django_db
@pytest.mark.parametrize("name", PAGES)
def test_the_anonymous_are_sent_to_sign_in(client, name):
    response = client.get(reverse(f"dashboard:{name}"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login") + "?next=/dashboard/")


@pytest.mark.django_db
@pytest.mark.parametrize("name", PAGES)
def test_a_signed_in_non_staff_user_is_refused(client, django_user_model, name):
    client.force_login(django_user_model.objects.create_user("manager", password="pw-x-1"))
    response = client.get(reverse(f"dashboard:{name}"))
    assert response.status_code == 403
    assert "The dashboard is for staff" in text(response)
    assert response["Content-Security-Policy"] == CSP


@pytest.mark.django_db
def test_a_non_staff_user_cannot_act(client, django_user_model, registry):
    client.force_login(django_user_model.objects.create_user("manager", password="pw-x-1"))
    server = registry["server"]
    response = client.post(reverse("dashboard:server-enabled", args=[server.pk]), {"enabled": "0"})
    assert response.status_code == 403
    server.refresh_from_db()
    assert server.enabled
    # The refusal itself is audited (issue 14): who tried what.
    event = AuditEvent.objects.get(event_type__startswith="dashboard.")
    assert (event.actor_id, event.result, event.details) == (
        "manager",
        "BLOCKED",
        {"permission": "staff"},
    )


@pytest.mark.django_db
@pytest.mark.parametrize("name", PAGES)
def test_pages_carry_a_strict_csp_and_are_not_cached(staff_client, name):
    response = staff_client.get(reverse(f"dashboard:{name}"))
    assert response.status_code == 200
    assert response["Content-Security-Policy"] == CSP
    assert "no-store" in response["Cache-Control"]
    page = response.content.decode()
    # No inline script or style: the CSP would block it.
    assert re.findall(r"<script(?![^>]*\bsrc=)", page) == []
    assert " style=" not in page and "<style" not in page
    assert "/static/dashboard/live.js" in page


@pytest.mark.django_db
def test_the_root_redirects_to_the_dashboard(staff_client):
    response = staff_client.get("/")
    assert response.status_code == 302 and response["Location"] == "/dashboard/"


@pytest.mark.django_db
def test_empty_states_say_what_to_do(staff_client):
    overview = staff_client.get(reverse("dashboard:overview"))
    assert "No MCP server yet — add one in admin" in text(overview)
    assert reverse("admin:pools_mcpserver_add") in overview.content.decode()
    assert "No agent yet" in text(overview) and "No Director yet" in text(overview)
    assert "No MCP server yet" in text(staff_client.get(reverse("dashboard:mcplets")))
    assert "No run yet" in text(staff_client.get(reverse("dashboard:runs")))
    assert "Nothing waits for a person" in text(staff_client.get(reverse("dashboard:approvals")))
    # The operator's own account is the trail's first event: no tool event yet.
    tools = staff_client.get(reverse("dashboard:audit"), {"event_type": "TOOL_EXECUTED"})
    assert "No event matches these filters" in text(tools)


@pytest.mark.django_db(transaction=True)
def test_each_page_shows_the_scenario(staff_client, scenario):
    overview = text(staff_client.get(reverse("dashboard:overview")))
    assert "weather-api" in overview and "ConnectError" in overview  # a server's last error
    assert "8 MCPlets accepted" in overview and "3 MCPlets rejected" in overview
    assert "1 pending approval" in overview and "send_email" in overview
    assert "dispatch-agent awaiting approval" in overview  # a run in progress
    assert "info-gathering-agent Failed" in overview  # a recent failure, with its reason
    assert "has no turn 2" in overview
    assert "At 06:00 PM UTC" in overview and "0 18 * * * (UTC)" in overview  # the schedule
    assert re.search(r"\d{4}-\d\d-\d\d 18:00:00 \(in ", overview)  # its next run
    assert "ran" in overview  # its last cycle

    mcplets = text(staff_client.get(reverse("dashboard:mcplets")))
    assert "it declares no _meta.mcpletType" in mcplets
    assert "visible to the model without _meta.auth" in mcplets
    assert "ops-pool (unknown)" in mcplets
    assert "send_email reference action media-pool app passkey · strict Accepted" in mcplets
    rejected = text(staff_client.get(reverse("dashboard:mcplets"), {"status": "rejected"}))
    assert "blast_sms" in rejected and "send_email" not in rejected

    approvals = text(staff_client.get(reverse("dashboard:approvals")))
    assert "sato@example.jp" in approvals and "Approve the e-mail" in approvals  # pending
    assert "Rejected X_APPROVAL_REJECTED manager" in approvals  # history: who rejected
    assert "approved manager" in approvals  # ... and who approved the plan (not "executed")

    runs = text(staff_client.get(reverse("dashboard:runs")))
    for key in ("campaign", "failed", "rejected"):
        assert scenario[key][:8] in runs
    assert "Find tomorrow's bookings" in runs
    active = text(staff_client.get(reverse("dashboard:runs"), {"active": "1"}))
    assert scenario["campaign"][:8] in active and scenario["failed"][:8] not in active

    control = text(staff_client.get(reverse("dashboard:control")))
    assert "Run Director now" in control and "Pause schedule" in control
    assert "Cancel run" in control


@pytest.mark.django_db(transaction=True)
def test_the_agents_page_shows_grants_and_the_llm_tool_lists(staff_client, scenario):
    response = staff_client.get(reverse("dashboard:agents"))
    rows = {row.agent.agent_id: row for row in response.context["rows"]}
    pools = [pool.name for pool in response.context["pools"]]
    assert pools == ["info-pool", "media-pool"]
    assert rows["info-gathering-agent"].granted == [True, False]
    assert rows["dispatch-agent"].granted == [False, True]
    # Exactly the gateway's list: no app-only tool (send_email, app_only_lookup), no rejected
    # one, no tool of a pool it lacks (read_site_stats).
    assert [t.name for t in rows["info-gathering-agent"].tools] == [
        "approve_plan",
        "broken_stats",
        "fetch_web_content",
        "list_tables",
        "query_crm",
    ]
    assert "read_site_stats" in [t.name for t in rows["dispatch-agent"].tools]
    assert "send_email" not in text(response).split("What each agent")[1]
    target, tools = rows["partner-bot"].partner_views[0]
    assert target.agent_id == "info-gathering-agent" and "fetch_web_content" in [
        t.name for t in tools
    ]
    assert "offered no tools" in text(response)  # the Director


@pytest.mark.django_db
def test_the_audit_log_filters(staff_client):
    o = AuditEvent.objects.count()  # the operator's account: configuration events

    def at(*numbers):
        return [o + n for n in numbers]

    record = audit.record
    record("TOOL_EXECUTED", actor_type="agent", actor_id="info", target_tool="query_crm")
    record("TOOL_BLOCKED", actor_type="agent", actor_id="dispatch", target_tool="send_email")
    record("mcplet.tool.accepted", target_tool="query_crm")
    record("TOOL_EXECUTED", actor_type="agent", actor_id="info", details={"partner": "bot"})
    record("a2a.partner.connected", actor_type="partner", actor_id="bot")

    def seqs(**query):
        response = staff_client.get(reverse("dashboard:audit"), query)
        return [e.seq for e in response.context["page"].object_list]

    everything = list(range(o + 5, 0, -1))
    assert seqs() == everything
    assert seqs(event_type="TOOL_EXECUTED") == at(4, 1)
    assert seqs(event_type="mcplet.*") == at(3) + list(range(o, 0, -1))
    assert seqs(event_type="configuration") == list(range(o, 0, -1))
    assert seqs(agent="info") == at(4, 1)
    assert seqs(tool="query_crm") == at(3, 1)
    assert seqs(partner="bot") == at(5, 4)
    assert seqs(since="2000-01-01T00:00", until="2999-01-01T00:00:00") == everything
    assert seqs(since="2999-01-01T00:00") == []
    assert seqs(since="not a date") == everything  # ignored, not an error


@pytest.mark.django_db
def test_long_lists_are_paginated_and_pages_keep_the_filters(staff_client):
    o = AuditEvent.objects.count()
    for i in range(60):
        audit.record("TOOL_EXECUTED", actor_type="agent", actor_id="info", details={"i": i})
    first = staff_client.get(reverse("dashboard:audit"), {"agent": "info"})
    assert len(first.context["page"].object_list) == 50
    assert "?agent=info&amp;page=2" in first.content.decode()
    second = staff_client.get(reverse("dashboard:audit"), {"agent": "info", "page": 2})
    assert [e.seq for e in second.context["page"].object_list] == list(range(o + 10, o, -1))


@pytest.mark.django_db
def test_the_audit_page_shows_the_chain_state(staff_client):
    o = AuditEvent.objects.count()
    for _ in range(3):
        audit.record("TOOL_EXECUTED", actor_type="agent", actor_id="info")
    page = text(staff_client.get(reverse("dashboard:audit")))
    assert f"Chain intact: {o + 3} events verified" in page

    AuditEvent.objects.filter(seq=o + 2).update(result="FAILURE")  # tampering, as raw SQL would
    response = staff_client.post(reverse("dashboard:audit-verify"), follow=True)
    page = text(response)
    assert f"Chain broken: audit chain broken at event #{o + 2}" in page and "edited" in page


@pytest.mark.django_db
def test_the_export_is_json_lines_that_verify_and_is_audited(staff_client):
    o = AuditEvent.objects.count()
    for tool in ("query_crm", "send_email", "query_crm"):
        audit.record("TOOL_EXECUTED", actor_type="agent", actor_id="info", target_tool=tool)
    response = staff_client.get(reverse("dashboard:audit-export"), {"tool": "query_crm"})
    assert response["Content-Type"].startswith("application/jsonl")
    assert response["Content-Disposition"].startswith('attachment; filename="audit-')
    lines = [json.loads(line) for line in b"".join(response).splitlines()]
    assert [line["seq"] for line in lines] == [o + 1, o + 3]
    assert lines[0]["target"]["tool_name"] == "query_crm"
    stored = AuditEvent.objects.get(seq=o + 1)
    assert (lines[0]["hash"], lines[0]["prev_hash"]) == (stored.hash, stored.prev_hash)
    exported = AuditEvent.objects.get(event_type="dashboard.export_audit")
    assert exported.actor_id == "operator" and exported.details == {
        "filters": {"tool": "query_crm"}
    }


@pytest.mark.django_db(transaction=True)
def test_the_trace_page_draws_the_sequence_and_offers_each_payload(staff_client, scenario):
    response = staff_client.get(reverse("dashboard:trace", args=[scenario["campaign"]]))
    page = response.content.decode()
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="sequence"' in page
    trace = response.context["trace"]
    assert [lane.label for lane in trace.lanes] == [
        "director",
        "info-gathering-agent",
        "planning-agent",
        "dispatch-agent",
        "people",
        "reference",
    ]
    kinds = [(s.kind, s.source, s.target, s.label) for s in trace.steps]
    assert kinds[0][:3] == ("request", "director", "info-gathering-agent")
    assert ("tool", "info-gathering-agent", "server:reference", "query_crm") in kinds
    assert ("approval", "planning-agent", "approver", "Approve the campaign plan") in kinds
    assert ("decision", "approver", "planning-agent", "approved by manager") in kinds
    assert ("approval", "dispatch-agent", "approver", "approve send_email?") in kinds
    tool = next(s for s in trace.steps if s.label == "query_crm")
    assert tool.payload["call"]["arguments"] == {"filter": "bookings tomorrow"}
    assert tool.payload["call"]["envelope"]["_meta"]["toolId"] == "query_crm"
    assert tool.detail.endswith(" ms")  # its duration
    for step in trace.steps:  # each arrow links to its payload below the diagram
        assert f'href="#step-{step.number}"' in page and f'id="step-{step.number}"' in page
    assert len(trace.activations) == 3  # one bar per run

    failed = staff_client.get(reverse("dashboard:trace", args=[scenario["failed"]]))
    notes = [s for s in failed.context["trace"].steps if s.kind == "note"]
    assert any(s.label == "✕ drop_database: NOT_FOUND" and s.status == "blocked" for s in notes)

    missing = "00000000-0000-4000-8000-000000000000"
    assert staff_client.get(reverse("dashboard:trace", args=[missing])).status_code == 404


@pytest.mark.django_db
def test_approval_pages_open_in_a_tab_of_their_own(staff_client, registry):
    """An approval page says "close this tab" once decided: it must not be the dashboard's."""
    from mcplet_host import gateway

    held = gateway.call_tool(
        registry["dispatch"], "send_email", {"to": ["a@example.jp"], "body": "hi"}, "app"
    ).ceremony
    for name in ("overview", "approvals"):
        page = staff_client.get(reverse(f"dashboard:{name}")).content.decode()
        row = page.split(f'id="approval-{held.pk}"')[1].split("</tr>")[0]
        assert (
            f'<a data-href="url" href="{held.get_absolute_url()}" target="_blank" '
            'rel="noopener">approval page</a>'
        ) in row
        # The rows that arrive live are cloned from this template.
        template = page.split('<template id="tpl-approval">')[1].split("</template>")[0]
        assert '<a data-href="url" target="_blank" rel="noopener">approval page</a>' in template


@pytest.mark.parametrize(
    ("name", "status"),
    [("%00", 400), ("a%00b", 400), ("%ED%A0%80", 200), ("%5C%5C", 200), ("x" * 5000, 200)],
)
def test_the_tools_name_filter_takes_hostile_text(staff_client, name, status):
    """NUL is refused before any view; a lone surrogate's bytes, backslashes and 5,000
    characters are searched for (cut to 200), never a 500."""
    assert staff_client.get(f"/dashboard/mcplets/?name={name}").status_code == status
