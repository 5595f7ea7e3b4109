"""Plan §9, the whole reference scenario in one go: Director → information → planning → the
store manager approves the plan → dispatch → the store manager approves the e-mail with a
passkey → the e-mail MCPlet has the host verify the assertion and sends one message per at-risk
guest. Real MCPlets over stdio, the real backing service, the host's verify-assertion endpoint
on a live server; the bus and continuations run eagerly.

Twice: on the scripted model, and on "a real model" — an OpenAI model name, so every turn goes
through litellm's OpenAI request path to an OpenAI-compatible server on loopback, which answers
what the reference script would (the scenario runs unchanged with MCPLET_LLM_MODEL set)."""

from email import policy
from email.parser import BytesParser
from pathlib import Path

import litellm
import pytest

from a2a.models import A2AMessage
from agents import director
from agents.models import AgentRun
from held.models import Ceremony
from mcplet_host.models import AuditEvent
from tests.agents.openai_stub import Canned, openai_stub
from tests.processes import free_port
from tests.restaurant.conftest import approve, sent_mail
from tests.restaurant.test_reference_script import SCRIPT_API_URL, at_risk

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]
SCRIPT = Path(__file__).resolve().parents[2] / "agents" / "scripts" / "reference.yaml"


def as_openai_server(agents):
    """Answer each chat-completions request as the reference script would for the agent whose
    system prompt it carries (the only thing a model sees of who is asking)."""
    prompts = {a.agent_id: a.system_prompt for a in agents.values() if a.system_prompt}

    def respond(body):
        system = next(m["content"] for m in body["messages"] if m["role"] == "system")
        agent = max((a for a, p in prompts.items() if system.startswith(p)), key=len)
        reply = litellm.completion(
            model="scripted/reference", messages=body["messages"], metadata={"agent_id": agent}
        )
        return Canned(200, reply.model_dump())

    return respond


@pytest.fixture(params=["scripted/reference", "openai/gpt-4o-mini"])
def model(request, scenario, settings, monkeypatch):
    """The model every agent uses (none has its own): yields the requests a real model got."""
    settings.MCPLET_LLM_MODEL = request.param
    if not request.param.startswith("openai/"):
        yield []
        return
    agents = {k: v for k, v in scenario.items() if k != "servers"}
    with openai_stub(as_openai_server(agents)) as (url, requests):
        monkeypatch.setenv("OPENAI_API_BASE", url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        yield requests


def pending():
    (ceremony,) = Ceremony.objects.filter(status=Ceremony.Status.PENDING)
    return ceremony


def test_director_to_sent_emails(
    scenario, model, backend_url, outbox, live_server, manager, tmp_path, settings
):
    # The script fetches the forecast from the default backend address; here it runs elsewhere.
    script = SCRIPT.read_text(encoding="utf-8").replace(SCRIPT_API_URL, backend_url)
    (tmp_path / "reference.yaml").write_text(script, encoding="utf-8")
    settings.MCPLET_SCRIPT_DIRS = [str(tmp_path)]
    mail_server = scenario["servers"]["restaurant-mail"]
    mail_server.env |= {"MCPLET_VERIFY_URL": f"{live_server.url}/auth/verify-assertion"}
    mail_server.save(update_fields=["env"])

    cycle = director.run_cycle("director")
    assert cycle.outcome == "ran", cycle

    info = AgentRun.objects.get(agent__agent_id="info-gathering-agent")
    assert info.status == AgentRun.Status.SUCCESS, info.error
    tools = [m for m in info.transcript if m["role"] == "tool"]
    assert len(tools) == 5 and all('"error"' not in m["content"] for m in tools)
    plan_approval = pending()
    assert plan_approval.prompt_message.startswith("キャンペーン計画を承認してください")
    assert sent_mail(outbox) == []

    approve(manager, plan_approval)
    planning = AgentRun.objects.get(agent__agent_id="planning-agent")
    assert planning.status == AgentRun.Status.SUCCESS and planning.result["approvedAt"]
    email_approval = pending()
    assert email_approval.tool_name == "send_email"
    assert email_approval.prompt_message == "メール送信を承認してください"
    assert sent_mail(outbox) == []  # nothing leaves before the passkey

    approve(manager, email_approval)
    email_approval.refresh_from_db()
    assert email_approval.status == Ceremony.Status.EXECUTED, email_approval.result
    dispatch = AgentRun.objects.get(agent__agent_id="dispatch-agent")
    assert dispatch.status == AgentRun.Status.SUCCESS, dispatch.error
    assert dispatch.result["dispatched"] == {"succeeded": 1, "failed": 0}

    messages = [
        BytesParser(policy=policy.default).parsebytes(f.read_bytes()) for f in sent_mail(outbox)
    ]
    recipients = sorted(
        (m["To"].addresses[0].display_name, m["To"].addresses[0].addr_spec) for m in messages
    )
    assert recipients == sorted((p["name"], p["email"]) for p in at_risk())
    for message in messages:
        name = message["To"].addresses[0].display_name
        assert message.get_content().startswith(f"{name} 様")
    assert AuditEvent.objects.filter(event_type="mcplet.passkey.verified").count() == 1
    contexts = set(A2AMessage.objects.values_list("context_id", flat=True))
    assert len(contexts) == 1  # one workflow, one contextId
    if model:  # what the real model was sent: OpenAI requests, each agent only its own tools
        assert {r["path"] for r in model} == {"/v1/chat/completions"} and len(model) == 7
        assert {r["json"]["model"] for r in model} == {"gpt-4o-mini"}
        info_prompt = scenario["info-gathering-agent"].system_prompt
        offered = {
            tool["function"]["name"]
            for r in model
            if r["json"]["messages"][0]["content"].startswith(info_prompt)
            for tool in r["json"]["tools"]
        }
        assert offered == {
            "query_crm",
            "query_erp",
            "query_hr",
            "fetch_web_content",
            "call_external_api",
        }


def test_an_unreachable_verify_endpoint_is_failed_everywhere_with_its_url(
    scenario, backend_url, outbox, manager, tmp_path, settings, staff_client
):
    """The e-mail MCPlet cannot reach the host's verify-assertion endpoint: after both
    approvals nothing is sent, and the call, the run, the approvals, the trace and the overview
    all say Failed, with the URL it tried and what to check."""
    script = SCRIPT.read_text(encoding="utf-8").replace(SCRIPT_API_URL, backend_url)
    (tmp_path / "reference.yaml").write_text(script, encoding="utf-8")
    settings.MCPLET_SCRIPT_DIRS, settings.MCPLET_LLM_MODEL = [str(tmp_path)], "scripted/reference"
    verify_url = f"http://127.0.0.1:{free_port()}/auth/verify-assertion"  # nothing listens
    mail_server = scenario["servers"]["restaurant-mail"]
    mail_server.env |= {"MCPLET_VERIFY_URL": verify_url}
    mail_server.save(update_fields=["env"])

    assert director.run_cycle("director").outcome == "ran"
    approve(manager, pending())  # the plan
    email_approval = pending()
    approve(manager, email_approval)

    email_approval.refresh_from_db()
    assert email_approval.status == Ceremony.Status.FAILED, email_approval.result
    error = email_approval.result["error"]
    assert error["code"] == "SERVICE_UNAVAILABLE" and verify_url in error["message"]
    assert sent_mail(outbox) == []
    dispatch = AgentRun.objects.get(agent__agent_id="dispatch-agent")
    assert dispatch.status == AgentRun.Status.ERROR, dispatch.status  # failed, not cancelled
    assert dispatch.error["code"] == "SERVICE_UNAVAILABLE"
    assert verify_url in dispatch.error["message"]
    assert dispatch.result["dispatched"] == {"succeeded": 0, "failed": 1}
    response = A2AMessage.objects.get(reply_to=dispatch.request.message_id).body
    assert response["status"] == "error" and verify_url in response["payload"]["error"]["message"]
    plan = AgentRun.objects.get(agent__agent_id="planning-agent")
    assert plan.status == AgentRun.Status.SUCCESS  # its result was approved and handed on

    hint = "MCPLET_VERIFY_URL"
    approvals = staff_client.get("/dashboard/approvals/").content.decode()
    row = approvals.split(f'id="approval-{email_approval.pk}"')[1].split("</tr>")[0]
    assert '<span class="badge" data-status="failed">Failed</span>' in row
    assert verify_url in row and hint in row and "Executed" not in row
    plan_approval = Ceremony.objects.get(kind=Ceremony.Kind.RESULT)
    plan_row = approvals.split(f'id="approval-{plan_approval.pk}"')[1]
    outcome = plan_row.split('<td class="outcome">')[1].split("</td>")[0]
    assert outcome == '<span class="badge" data-status="executed">approved</span>'  # not "run"
    trace = staff_client.get(f"/dashboard/runs/{dispatch.context_id}/").content.decode()
    run_row = trace.split(f'id="run-{dispatch.pk}"')[1].split("</tr>")[0]
    assert 'data-status="error" data-field="status_label">Failed</span>' in run_row
    assert verify_url in run_row and hint in run_row
    assert f"failed · SERVICE_UNAVAILABLE · the verify-assertion endpoint {verify_url}" in trace
    overview = staff_client.get("/dashboard/").content.decode()
    failures = overview.split("Recent failures")[1].split("</section>")[0]
    assert "dispatch-agent" in failures and ">Failed</span>" in failures
    assert verify_url in failures and hint in failures
