"""The eight MCPlets in process (`mcp.Client`): their answers, their readable text, and the
strict actions' refusals — each refusal an error envelope with nothing sent."""

import json

import anyio
import pytest
from jsonschema import validate
from mcp import Client

from mcplets.restaurant import crm, erp, external_api, hr, mail, site_stats, sns, web
from passkey.models import BackendToken
from pools.models import McpServer
from tests.restaurant.conftest import sent_mail

MAIL = {"to": ["佐藤 花子 <sato.hanako@example.jp>"], "subject": "明日", "body": "{name} 様"}
BOGUS = {"type": "passkey_assertion", "credential": {"id": "bm9wZQ", "response": {}}}


def call(module, tool, arguments, meta=None):
    async def run():
        async with Client(module.server, mode="legacy") as client:
            return await client.call_tool(tool, arguments, meta=meta)

    return anyio.run(run)


def code(result):
    assert result.is_error, result
    return result.structured_content["error"]["code"]


@pytest.mark.parametrize(
    "module, tool, arguments, says",
    [
        (crm, "query_crm", {"query": "customers", "filter": "rain_cancel_tendency"}, "佐藤 花子"),
        (crm, "query_crm", {"query": "reservations", "date": "tomorrow"}, "confirmed"),
        (crm, "query_crm", {"filter": "rain"}, ">= 0.6"),
        (erp, "query_erp", {"item": "dessert"}, "抹茶プリン"),
        (hr, "query_hr", {"date": "tomorrow"}, "パティシエ"),
        (site_stats, "read_site_stats", {"days": 7}, "EPARK"),
        (external_api, "call_external_api", {"source": "supplier_stock"}, "真鯛"),
        (external_api, "call_external_api", {"source": "local_events", "date": "tomorrow"}, "中止"),
    ],
)
def test_reads_answer_with_data_and_a_summary(api, module, tool, arguments, says):
    result = call(module, tool, arguments)
    assert not result.is_error, result.content
    envelope = result.structured_content
    assert envelope["_meta"]["toolId"] == tool and envelope["_meta"]["mcpletType"] == "read"
    validate(envelope["result"], module.RESULT_SCHEMA)
    summary, _, data = result.content[0].text.partition("\n\n")
    assert says in summary and not summary.startswith("{")  # for people first, then the data
    assert json.loads(data) == envelope["result"]


def test_fetch_web_content_reads_the_forecast(api):
    result = call(web, "fetch_web_content", {"url": f"{api}/weather/forecast?date=tomorrow"})
    body = result.structured_content["result"]
    assert body["status"] == 200 and body["json"]["rain"] is True
    assert body["json"]["condition"] == "rain"
    validate(body, web.RESULT_SCHEMA)
    refused = call(web, "fetch_web_content", {"url": "file:///etc/passwd"})
    assert code(refused) == "VALIDATION_ERROR"


def test_fetch_web_content_does_not_follow_redirects(api, monkeypatch):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class Redirect(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/moved"
        body = call(web, "fetch_web_content", {"url": url}).structured_content["result"]
    finally:
        server.shutdown()
        server.server_close()
    assert body["status"] == 302 and body["location"].startswith("http://169.254.169.254")


def test_an_unreachable_service_is_service_unavailable(monkeypatch):
    monkeypatch.setenv("RESTAURANT_API_URL", "http://127.0.0.1:9")
    result = call(crm, "query_crm", {"query": "customers"})
    assert code(result) == "SERVICE_UNAVAILABLE"
    assert result.structured_content["error"]["retryable"] is True


def test_a_question_the_service_refuses_is_a_validation_error(api):
    assert code(call(crm, "query_crm", {"filter": "sunny"})) == "VALIDATION_ERROR"
    assert code(call(hr, "query_hr", {"date": "someday"})) == "VALIDATION_ERROR"


@pytest.mark.parametrize(
    "module, tool, arguments",
    [(mail, "send_email", MAIL), (sns, "post_sns", {"text": "明日は雨です"})],
)
def test_strict_actions_without_an_assertion_are_auth_required(
    api, outbox, module, tool, arguments
):
    result = call(module, tool, arguments)
    assert code(result) == "AUTH_REQUIRED"
    assert result.structured_content["_meta"] == {
        **result.structured_content["_meta"],
        "toolId": tool,
        "mcpletType": "action",
        "visibility": ["app"],
    }
    assert sent_mail(outbox) == [] and not (outbox / "sns.jsonl").exists()


def test_send_email_without_a_verify_endpoint_sends_nothing(api, outbox, monkeypatch):
    monkeypatch.delenv("MCPLET_VERIFY_URL", raising=False)
    result = call(mail, "send_email", MAIL, meta={"mcplet_auth": BOGUS})
    assert code(result) == "SERVICE_UNAVAILABLE" and sent_mail(outbox) == []
    monkeypatch.setenv("MCPLET_VERIFY_URL", "http://127.0.0.1:9/auth/verify-assertion")
    result = call(mail, "send_email", MAIL, meta={"mcplet_auth": BOGUS})
    assert code(result) == "SERVICE_UNAVAILABLE" and sent_mail(outbox) == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "module, tool, arguments",
    [(mail, "send_email", MAIL), (sns, "post_sns", {"text": "明日は雨です"})],
)
def test_a_bad_assertion_is_auth_failed_by_the_host(
    api, outbox, passkey_https, live_server, monkeypatch, module, tool, arguments
):
    server = McpServer.objects.create(
        name=f"restaurant-{module.__name__.rsplit('.', 1)[1]}",
        transport="stdio",
        command="python",
        args=["-m", module.__name__],
    )
    _, token = BackendToken.issue(server, "test")
    monkeypatch.setenv("MCPLET_VERIFY_URL", f"{live_server.url}/auth/verify-assertion")
    monkeypatch.setenv("MCPLET_VERIFY_TOKEN", token)
    result = call(module, tool, arguments, meta={"mcplet_auth": BOGUS})
    assert code(result) == "AUTH_FAILED", result.structured_content
    assert sent_mail(outbox) == [] and not (outbox / "sns.jsonl").exists()
    monkeypatch.setenv("MCPLET_VERIFY_TOKEN", "mcpv_not-a-real-token")
    result = call(module, tool, arguments, meta={"mcplet_auth": BOGUS})
    assert code(result) == "AUTH_FAILED" and "unauthenticated" in str(result.structured_content)
    assert sent_mail(outbox) == []
