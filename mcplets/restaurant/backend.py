"""The restaurant's backing service: CRM, ERP, HR, weather, booking-site statistics, external
APIs, e-mail and SNS, over plain HTTP + JSON, with fixed data from `data/`. The reference
MCPlets reach it through `RESTAURANT_API_URL`, so real services replace it by configuration.

    python -m mcplets.restaurant.backend [--host 127.0.0.1] [--port 5100]

The port defaults to RESTAURANT_API_URL's (5100 if unset), where the MCPlets look for it.

    GET  /crm/customers?filter=rain_cancel_tendency   customers who often cancel when it rains
    GET  /crm/customers?id=C001                       one customer
    GET  /crm/reservations?date=YYYY-MM-DD|tomorrow[&filter=rain_cancel_tendency][&status=…]
    GET  /erp/inventory?item=dessert                  stock (category, SKU or part of a name)
    GET  /hr/staff?date=…[&role=hall]                 staff on shift
    GET  /weather/forecast?date=…                     the forecast (tomorrow: rain)
    GET  /site/stats[?days=7]                         booking-site (EPARK) access statistics
    GET  /external/supplier-stock[?item=…]            the supplier's stock
    GET  /external/local-events?date=…                events near the store
    POST /email/send  {to: [...], subject, body}      sends over SMTP (SMTP_HOST, else a sink
                                                       writing .eml files in the outbox)
    POST /sns/post    {platform, text}                posts (logged to the outbox)
    GET  /healthz

POSTs honour an `Idempotency-Key` header (a repeat gets the first answer, nothing is sent
twice) and, when `RESTAURANT_API_TOKEN` is set, need `Authorization: Bearer <token>`.
"""

import argparse
import hmac
import json
import logging
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from mcplets.restaurant import delivery, store

DEFAULT_PORT = 5100
API_URL_ENV = "RESTAURANT_API_URL"  # where the MCPlets look for this service (common.py)
TOKEN_ENV = "RESTAURANT_API_TOKEN"  # noqa: S105 (a variable name)
MAX_BODY = 1024 * 1024
log = logging.getLogger("mcplets.restaurant.backend")


def _one(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[-1] if values else None


def _days(query: dict[str, list[str]]) -> int:
    try:
        return int(_one(query, "days") or 7)
    except ValueError:
        raise store.QueryError("days must be a whole number") from None


GET_ROUTES: dict[str, Callable[[dict[str, list[str]]], dict[str, Any]]] = {
    "/crm/customers": lambda q: store.customers(_one(q, "filter"), _one(q, "id")),
    "/crm/reservations": lambda q: store.reservations(
        _one(q, "date"), _one(q, "filter"), _one(q, "status")
    ),
    "/erp/inventory": lambda q: store.inventory(_one(q, "item")),
    "/hr/staff": lambda q: store.staff(_one(q, "date"), _one(q, "role")),
    "/weather/forecast": lambda q: store.forecast(_one(q, "date")),
    "/site/stats": lambda q: store.site_stats(_days(q)),
    "/external/supplier-stock": lambda q: store.supplier_stock(_one(q, "item")),
    "/external/local-events": lambda q: store.local_events(_one(q, "date")),
    "/healthz": lambda q: {"status": "ok", "today": store.on(0)},
}

POST_ROUTES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "/email/send": lambda b: delivery.send_email(b.get("to"), b.get("subject"), b.get("body")),
    "/sns/post": lambda b: delivery.post_sns(b.get("platform", "x"), b.get("text")),
}


class Replays:
    """Answers already given to an Idempotency-Key (the newest 1,000)."""

    def __init__(self, size: int = 1000) -> None:
        self.size, self.answers = size, OrderedDict()
        self.lock = threading.Lock()
        self.busy: dict[str, threading.Lock] = {}

    def key_lock(self, key: str) -> threading.Lock:
        with self.lock:
            return self.busy.setdefault(key, threading.Lock())

    def get(self, key: str):
        with self.lock:
            return self.answers.get(key)

    def put(self, key: str, answer) -> None:
        with self.lock:
            self.answers[key] = answer
            while len(self.answers) > self.size:
                self.answers.popitem(last=False)
            self.busy.pop(key, None)


class Handler(BaseHTTPRequestHandler):
    server_version = "RestaurantBackend/1.0"
    replays = Replays()

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        parts = urlsplit(self.path)
        route = GET_ROUTES.get(parts.path.rstrip("/") or "/")
        if parts.path in ("", "/"):
            self._send(HTTPStatus.OK, {"service": store.STORE_NAME, "endpoints": _endpoints()})
            return
        if route is None:
            self._error(HTTPStatus.NOT_FOUND, "NOT_FOUND", f"no endpoint {parts.path}")
            return
        self._answer(lambda: route(parse_qs(parts.query)))

    def do_POST(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path.rstrip("/")
        route = POST_ROUTES.get(path)
        if route is None:
            self._error(HTTPStatus.NOT_FOUND, "NOT_FOUND", f"no endpoint POST {path}")
            return
        token = os.environ.get(TOKEN_ENV, "")
        given = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if token and not hmac.compare_digest(given.encode(), token.encode()):
            self._error(HTTPStatus.UNAUTHORIZED, "AUTH_REQUIRED", f"send the {TOKEN_ENV} token")
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "VALIDATION_ERROR", "body too large")
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._error(HTTPStatus.BAD_REQUEST, "VALIDATION_ERROR", "send a JSON object")
            return
        key = self.headers.get("Idempotency-Key", "").strip()
        if not key:
            self._answer(lambda: route(body))
            return
        with self.replays.key_lock(f"{path} {key}"):
            replay = self.replays.get(f"{path} {key}")
            if replay is not None:
                self._send(*replay, replayed=True)
                return
            status, payload = self._answer(lambda: route(body))
            if status == HTTPStatus.OK:
                self.replays.put(f"{path} {key}", (status, payload))

    def _answer(self, compute: Callable[[], dict[str, Any]]):
        try:
            payload = compute()
        except (store.QueryError, delivery.DeliveryError) as exc:
            return self._error(HTTPStatus.BAD_REQUEST, "VALIDATION_ERROR", str(exc))
        except store.NotFound as exc:
            return self._error(HTTPStatus.NOT_FOUND, "NOT_FOUND", str(exc))
        except OSError as exc:  # the SMTP server, the outbox
            log.exception("delivery failed")
            return self._error(HTTPStatus.BAD_GATEWAY, "SERVICE_UNAVAILABLE", str(exc))
        except Exception:
            log.exception("%s %s failed", self.command, self.path)
            return self._error(
                HTTPStatus.INTERNAL_SERVER_ERROR, "UNKNOWN_ERROR", "the service failed"
            )
        return self._send(HTTPStatus.OK, payload)

    def _error(self, status: HTTPStatus, code: str, message: str):
        return self._send(status, {"error": {"code": code, "message": message}})

    def _send(self, status: HTTPStatus, payload: dict[str, Any], replayed: bool = False):
        data = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        if replayed:
            self.send_header("Idempotent-Replayed", "true")
        self.end_headers()
        self.wfile.write(data)
        return status, payload

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        log.info("%s %s", self.address_string(), format % args)


def _endpoints() -> list[str]:
    return [f"GET {p}" for p in GET_ROUTES] + [f"POST {p}" for p in POST_ROUTES]


def default_port() -> int:
    """The port of RESTAURANT_API_URL, else 5100: the service listens where the MCPlets look, so
    a second host on one machine moves both with that one variable."""
    try:
        return urlsplit(os.environ.get(API_URL_ENV) or "").port or DEFAULT_PORT
    except ValueError:  # not a port: the default, and the MCPlets will say what is wrong
        return DEFAULT_PORT


def make_server(host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def serve_in_thread(host: str = "127.0.0.1", port: int = 0):
    """Start the service in a daemon thread (embedded mode, tests); returns (server, base URL).
    Stop it with `server.shutdown(); server.server_close()`."""
    server = make_server(host, port)
    threading.Thread(target=server.serve_forever, name="restaurant-backend", daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=default_port())
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    server = make_server(args.host, args.port)
    print(
        f"restaurant backend on http://{args.host}:{server.server_address[1]} "
        f"(outbox {delivery.outbox()}, mail via "
        f"{os.environ.get('SMTP_HOST') or 'a local SMTP sink into the outbox'})",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
