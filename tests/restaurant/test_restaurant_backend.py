"""The backing service's endpoints (plan §4), over real HTTP."""

import json
from datetime import date, timedelta
from email import policy
from email.parser import BytesParser
from urllib.parse import quote

import httpx
import pytest
from aiosmtpd.controller import Controller

from mcplets.restaurant import store
from tests.processes import free_port
from tests.restaurant.conftest import sent_mail


def call(url, body=None, headers=None):
    if body is None:
        response = httpx.get(url, headers=headers, timeout=10)
    else:
        response = httpx.post(url, json=body, headers=headers, timeout=10)
    return response.status_code, response.json(), response.headers


def get(base, path):
    status, body, _ = call(base + path)
    assert status == 200, body
    return body


def tomorrow():
    return (store.store_today() + timedelta(days=1)).isoformat()


def test_customers_with_a_rain_cancel_tendency(backend_url):
    body = get(backend_url, "/crm/customers?filter=rain_cancel_tendency")
    assert body["filter"] == "rain_cancel_tendency" and body["threshold"] == 0.6
    rains = [c["cancel_tendency"]["rain"] for c in body["customers"]]
    assert body["count"] == len(rains) == 15
    assert min(rains) >= 0.6 and rains == sorted(rains, reverse=True)
    assert all("phone" not in c for c in body["customers"])  # not the campaign's business
    assert get(backend_url, "/crm/customers")["count"] == 36
    (one,) = get(backend_url, "/crm/customers?id=C001")["customers"]
    assert one["name"] == "佐藤 花子" and one["email"] == "sato.hanako@example.jp"


def test_reservations_are_relative_to_the_store_day(backend_url):
    by_word = get(backend_url, "/crm/reservations?date=tomorrow")
    by_date = get(backend_url, f"/crm/reservations?date={tomorrow()}")
    assert by_word == by_date and by_word["date"] == tomorrow()
    assert by_word["count"] == 25 and by_word["confirmed"] == 24
    first = by_word["reservations"][0]
    assert set(first["customer"]) == {"id", "name", "email"} and first["date"] == tomorrow()
    risky = get(backend_url, "/crm/reservations?date=tomorrow&filter=rain_cancel_tendency")
    assert {r["customer"]["id"] for r in risky["reservations"]} >= {"C001", "C012"}
    confirmed = get(backend_url, "/crm/reservations?date=tomorrow&filter=rain&status=confirmed")
    assert confirmed["count"] == 10 and confirmed["covers"] == 26
    far = (date.fromisoformat(tomorrow()) + timedelta(days=300)).isoformat()
    assert get(backend_url, f"/crm/reservations?date={far}")["count"] == 0


def test_dessert_stock_weather_staff_and_site(backend_url):
    stock = get(backend_url, "/erp/inventory?item=dessert")
    assert stock["count"] == 5 and {i["category"] for i in stock["items"]} == {"dessert"}
    assert get(backend_url, "/erp/inventory?item=D01")["items"][0]["name"] == "抹茶プリン"
    assert get(backend_url, "/erp/inventory")["count"] == 11

    forecast = get(backend_url, "/weather/forecast?date=tomorrow")
    assert forecast["rain"] is True and forecast["condition"] == "rain"
    assert forecast["date"] == tomorrow() and forecast["precipitationProbability"] == 90
    assert get(backend_url, "/weather/forecast?date=today")["rain"] is False

    staff = get(backend_url, "/hr/staff?date=tomorrow")
    assert staff["count"] == 7 and "S03" in {s["id"] for s in staff["staff"]}
    assert get(backend_url, "/hr/staff?date=tomorrow&role=hall")["count"] == 2

    stats = get(backend_url, "/site/stats?days=7")
    assert stats["site"] == "EPARK" and len(stats["daily"]) == 7
    assert stats["totals"]["bookings"] == sum(d["bookings"] for d in stats["daily"])
    assert stats["period"]["to"] == store.store_today().isoformat()

    assert (
        get(backend_url, f"/external/supplier-stock?item={quote('真鯛')}")["items"][0]["available"]
        is False
    )
    events = get(backend_url, "/external/local-events?date=tomorrow")["events"]
    assert events[0]["status"] == "cancelled"


@pytest.mark.parametrize(
    "path, status, code",
    [
        ("/crm/customers?filter=sunny", 400, "VALIDATION_ERROR"),
        ("/crm/reservations?date=next-week", 400, "VALIDATION_ERROR"),
        ("/weather/forecast?date=2001-01-01", 404, "NOT_FOUND"),
        ("/site/stats?days=99", 400, "VALIDATION_ERROR"),
        ("/nowhere", 404, "NOT_FOUND"),
    ],
)
def test_bad_questions_get_json_errors(backend_url, path, status, code):
    got, body, _ = call(backend_url + path)
    assert got == status and body["error"]["code"] == code and body["error"]["message"]


def test_email_is_one_message_per_recipient_in_the_outbox(backend_url, outbox):
    status, body, _ = call(
        backend_url + "/email/send",
        {
            "to": ["佐藤 花子 <sato.hanako@example.jp>", "kato.yumi@example.com"],
            "subject": "明日のご来店について",
            "body": "{name} 様\n明日は雨の予報です。",
        },
    )
    # Over SMTP to the embedded sink, which keeps each message with its envelope recipient.
    assert status == 200 and body["transport"] == "smtp" and body["server"].startswith("127.")
    assert body["sent"] == 2 and body["failed"] == 0
    files = sent_mail(outbox)
    assert len(files) == 2
    messages = [BytesParser(policy=policy.default).parsebytes(f.read_bytes()) for f in files]
    by_to = {m["To"].addresses[0].addr_spec: m for m in messages}
    assert set(by_to) == {"sato.hanako@example.jp", "kato.yumi@example.com"}
    sato = by_to["sato.hanako@example.jp"]
    assert sato["To"].addresses[0].display_name == "佐藤 花子"
    assert sato.get_content().startswith("佐藤 花子 様")
    assert by_to["kato.yumi@example.com"].get_content().startswith("お客様 様")
    assert "kato" not in str(sato["To"])  # nobody sees another guest's address
    assert sato["X-Envelope-To"] == "sato.hanako@example.jp"
    assert {m["Message-ID"] for m in messages} == {r["messageId"] for r in body["messages"]}


@pytest.mark.parametrize(
    "body",
    [
        {"to": [], "subject": "s", "body": "b"},
        {"to": ["not-an-address"], "subject": "s", "body": "b"},
        {"to": ["a@example.jp", "A@example.jp"], "subject": "s", "body": "b"},
        {"to": ["a@example.jp"], "subject": "s\r\nBcc: x@example.org", "body": "b"},
        {"to": ["a@example.jp\nBcc: x@example.org"], "subject": "s", "body": "b"},
        {"to": ["a@example.jp"], "subject": "s", "body": ""},
    ],
)
def test_an_invalid_email_sends_nothing(backend_url, outbox, body):
    status, answer, _ = call(backend_url + "/email/send", body)
    assert status == 400 and answer["error"]["code"] == "VALIDATION_ERROR"
    assert sent_mail(outbox) == []


def test_posts_are_idempotent_per_key(backend_url, outbox):
    mail = {"to": ["a@example.jp"], "subject": "s", "body": "b"}
    first = call(backend_url + "/email/send", mail, {"Idempotency-Key": "k-1"})
    again = call(backend_url + "/email/send", mail, {"Idempotency-Key": "k-1"})
    assert first[1] == again[1] and again[2]["Idempotent-Replayed"] == "true"
    assert len(sent_mail(outbox)) == 1
    call(backend_url + "/email/send", mail, {"Idempotency-Key": "k-2"})
    assert len(sent_mail(outbox)) == 2


def test_sns_posts_are_logged(backend_url, outbox):
    status, post, _ = call(backend_url + "/sns/post", {"platform": "x", "text": "明日は雨です"})
    assert status == 200 and post["url"].endswith(post["postId"])
    logged = [json.loads(line) for line in (outbox / "sns.jsonl").read_text().splitlines()]
    assert logged == [post]
    status, answer, _ = call(backend_url + "/sns/post", {"platform": "x", "text": "あ" * 281})
    assert status == 400 and "280" in answer["error"]["message"]


def test_the_api_token_guards_the_posts(backend_url, outbox, monkeypatch):
    monkeypatch.setenv("RESTAURANT_API_TOKEN", "s3cret")
    mail = {"to": ["a@example.jp"], "subject": "s", "body": "b"}
    status, answer, _ = call(backend_url + "/email/send", mail)
    assert status == 401 and answer["error"]["code"] == "AUTH_REQUIRED"
    status, _, _ = call(backend_url + "/email/send", mail, {"Authorization": "Bearer nope"})
    assert status == 401 and sent_mail(outbox) == []
    status, _, _ = call(backend_url + "/email/send", mail, {"Authorization": "Bearer s3cret"})
    assert status == 200 and len(sent_mail(outbox)) == 1
    assert get(backend_url, "/crm/customers?id=C002")["count"] == 1  # reads stay open


class Relay:
    """Another SMTP server, standing in for Mailpit or the store's relay."""

    def __init__(self):
        self.received = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
        self.received.append((envelope.rcpt_tos, envelope.content))
        return "250 queued"


def test_email_goes_over_smtp_when_configured(backend_url, outbox, monkeypatch):
    relay = Relay()
    sink = Controller(relay, hostname="127.0.0.1", port=free_port())
    sink.start()
    try:
        monkeypatch.setenv("SMTP_HOST", "127.0.0.1")
        monkeypatch.setenv("SMTP_PORT", str(sink.port))
        status, body, _ = call(
            backend_url + "/email/send",
            {
                "to": ["佐藤 花子 <sato.hanako@example.jp>", "kato.yumi@example.com"],
                "subject": "明日のご来店について",
                "body": "{name} 様",
            },
        )
    finally:
        sink.stop()
    assert status == 200 and body["transport"] == "smtp" and body["sent"] == 2
    assert body["server"] == f"127.0.0.1:{sink.port}"
    assert [rcpt for rcpt, _ in relay.received] == [
        ["sato.hanako@example.jp"],
        ["kato.yumi@example.com"],
    ]
    first = BytesParser(policy=policy.default).parsebytes(relay.received[0][1])
    assert first.get_content().strip() == "佐藤 花子 様"
    assert sent_mail(outbox) == []  # the outbox is the embedded sink's, not a copy
