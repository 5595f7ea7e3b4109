"""How the backing service really sends: e-mail over SMTP (to `SMTP_HOST`, else to the embedded
mode's sink, which keeps each message as an `.eml` file in the outbox) and SNS posts to a log in
the outbox.

    SMTP_HOST, SMTP_PORT (25), SMTP_USER, SMTP_PASSWORD, SMTP_STARTTLS (false)
    RESTAURANT_MAIL_FROM   (森の食卓 新宿店 <reservations@restaurant.example.jp>)
    RESTAURANT_OUTBOX      ($MCPLET_VAR_DIR/outbox, else var/outbox beside the sources)
"""

import json
import os
import re
import smtplib
import threading
import uuid
from datetime import UTC, datetime
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import formatdate, make_msgid, parseaddr
from pathlib import Path
from typing import Any

from mcplets.restaurant import smtp_sink
from mcplets.restaurant.store import STORE_NAME

SOURCE_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FROM = f"{STORE_NAME} <reservations@restaurant.example.jp>"
MAX_RECIPIENTS = 200
SNS_PLATFORMS = ("x", "instagram", "line")
SNS_LIMITS = {"x": 280, "instagram": 2200, "line": 500}
_ADDRESS = re.compile(r"^[^@\s<>\"(),;:]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")
_log_lock = threading.Lock()


class DeliveryError(ValueError):
    """The request cannot be delivered as asked (the service answers 400)."""


def outbox() -> Path:
    explicit = os.environ.get("RESTAURANT_OUTBOX")
    if explicit:
        path = Path(explicit)
    else:
        path = Path(os.environ.get("MCPLET_VAR_DIR") or SOURCE_ROOT / "var") / "outbox"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _no_newlines(value: str, what: str) -> str:
    if "\r" in value or "\n" in value:
        raise DeliveryError(f"{what} must be one line")
    return value


def parse_recipient(text: str) -> tuple[str, str]:
    """'name@example.jp' or '佐藤 花子 <name@example.jp>' → (display name, address)."""
    _no_newlines(text, "a recipient")
    name, address = parseaddr(text)
    if not _ADDRESS.match(address or ""):
        raise DeliveryError(f"{text!r} is not an e-mail address")
    return name.strip(), address


def personalise(text: str, name: str) -> str:
    return text.replace("{name}", name or "お客様")


def build_message(sender: str, name: str, address: str, subject: str, body: str) -> EmailMessage:
    sender_name, sender_address = parseaddr(sender)
    local, _, domain = address.partition("@")
    sender_local, _, sender_domain = sender_address.partition("@")
    message = EmailMessage()
    message["From"] = Address(sender_name, sender_local, sender_domain)
    message["To"] = Address(name, local, domain)
    message["Subject"] = personalise(subject, name)
    message["Date"] = formatdate(localtime=True)
    message["Message-ID"] = make_msgid(domain=sender_domain or "localhost")
    message.set_content(personalise(body, name))
    return message


def send_email(to: list[str], subject: str, body: str) -> dict[str, Any]:
    """One message per recipient (nobody sees another guest's address)."""
    if not isinstance(to, list) or not to or not all(isinstance(t, str) for t in to):
        raise DeliveryError("to must be a non-empty list of addresses")
    if len(to) > MAX_RECIPIENTS:
        raise DeliveryError(f"at most {MAX_RECIPIENTS} recipients per call")
    if not isinstance(subject, str) or not subject.strip():
        raise DeliveryError("subject must be a non-empty string")
    if not isinstance(body, str) or not body.strip():
        raise DeliveryError("body must be a non-empty string")
    _no_newlines(subject, "the subject")
    recipients = [parse_recipient(t) for t in to]
    if len({a.lower() for _, a in recipients}) != len(recipients):
        raise DeliveryError("a recipient is listed twice")
    sender = os.environ.get("RESTAURANT_MAIL_FROM", DEFAULT_FROM)
    messages = [build_message(sender, n, a, subject, body) for n, a in recipients]
    host = os.environ.get("SMTP_HOST", "").strip()
    if host:
        port = int(os.environ.get("SMTP_PORT", "25"))
    else:
        host, port = smtp_sink.address(outbox)
    results = _send_smtp(host, port, messages)
    sent = sum(1 for r in results if r["status"] == "sent")
    return {
        "transport": "smtp",
        "server": f"{host}:{port}",
        "sent": sent,
        "failed": len(results) - sent,
        "messages": results,
    }


def _summary(message: EmailMessage, status: str, **extra: Any) -> dict[str, Any]:
    return {
        "to": str(message["To"].addresses[0].addr_spec),
        "messageId": str(message["Message-ID"]),
        "status": status,
        **extra,
    }


def _send_smtp(host: str, port: int, messages: list[EmailMessage]) -> list[dict[str, Any]]:
    results = []
    with smtplib.SMTP(host, port, timeout=15) as smtp:
        if os.environ.get("SMTP_STARTTLS", "").lower() in ("1", "true", "yes"):
            smtp.starttls()
        if os.environ.get("SMTP_USER"):
            smtp.login(os.environ["SMTP_USER"], os.environ.get("SMTP_PASSWORD", ""))
        for message in messages:
            try:
                smtp.send_message(message)
            except smtplib.SMTPException as exc:
                results.append(_summary(message, "failed", error=str(exc)))
            else:
                results.append(_summary(message, "sent"))
    return results


def post_sns(platform: str, text: str) -> dict[str, Any]:
    if platform not in SNS_PLATFORMS:
        raise DeliveryError(f"platform must be one of {', '.join(SNS_PLATFORMS)}")
    if not isinstance(text, str) or not text.strip():
        raise DeliveryError("text must be a non-empty string")
    if len(text) > SNS_LIMITS[platform]:
        raise DeliveryError(f"{platform} posts hold at most {SNS_LIMITS[platform]} characters")
    post_id = uuid.uuid4().hex[:12]
    post = {
        "postId": post_id,
        "platform": platform,
        "url": f"https://sns.example.jp/{platform}/mori-no-shokutaku/{post_id}",
        "postedAt": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "text": text,
    }
    with _log_lock, (outbox() / "sns.jsonl").open("a", encoding="utf-8") as log:
        log.write(json.dumps(post, ensure_ascii=False) + "\n")
    return post
