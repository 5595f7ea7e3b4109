"""The embedded mode's mail server: a loopback SMTP server (aiosmtpd) that keeps every message
it receives as an `.eml` file in the outbox instead of relaying it. The backing service sends to
it over real SMTP whenever no `SMTP_HOST` is configured, so the path an e-mail takes is the same
as with Mailpit or a real relay."""

import logging
import socket
import threading
import uuid
from datetime import UTC, datetime
from email import message_from_bytes, policy

from aiosmtpd.controller import Controller

BIND = "127.0.0.1"
logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd logs every command


class OutboxHandler:
    """Writes each message, with the envelope's recipients, to the outbox of the moment (read
    per message: tests point RESTAURANT_OUTBOX somewhere else for each test)."""

    def __init__(self, outbox):
        self.outbox = outbox

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
        message = message_from_bytes(envelope.original_content, policy=policy.SMTP)
        message["X-Envelope-To"] = ", ".join(envelope.rcpt_tos)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        path = self.outbox() / f"{stamp}-{uuid.uuid4().hex[:8]}.eml"
        temp = path.with_suffix(".tmp")
        temp.write_bytes(message.as_bytes())
        temp.replace(path)  # a reader never sees half a message
        return "250 Message accepted for delivery"


def _free_port():
    with socket.socket() as probe:
        probe.bind((BIND, 0))
        return probe.getsockname()[1]


_sink = None
_lock = threading.Lock()


def address(outbox):
    """(host, port) of this process's sink, started on first use."""
    global _sink
    with _lock:
        if _sink is None:
            _sink = Controller(OutboxHandler(outbox), hostname=BIND, port=_free_port())
            _sink.start()
    return _sink.hostname, _sink.port
