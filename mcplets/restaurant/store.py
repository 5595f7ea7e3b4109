"""The restaurant's fixed reference data (`data/*.json`) and the queries the backing service
answers. Dates are stored as day offsets from the store's today, so "tomorrow" is always
tomorrow; `RESTAURANT_TZ` (default Asia/Tokyo) says where the store's day begins."""

import json
import os
from datetime import UTC, date, datetime, timedelta, timezone
from functools import cache
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DATA_DIR = Path(__file__).resolve().parent / "data"
TZ_ENV = "RESTAURANT_TZ"
DEFAULT_TZ = "Asia/Tokyo"
STORE_NAME = "森の食卓 新宿店"
# Filters the CRM knows, with the aliases people (and LLMs) use for them.
RAIN_FILTER = "rain_cancel_tendency"
FILTER_ALIASES = {RAIN_FILTER: RAIN_FILTER, "rain": RAIN_FILTER}
DATE_WORDS = {"yesterday": -1, "today": 0, "tomorrow": 1}


class QueryError(ValueError):
    """A question the data cannot answer as asked (the service answers 400)."""


class NotFound(Exception):
    """Nothing is known about what was asked for (the service answers 404)."""


@cache
def load(name: str) -> dict[str, Any]:
    return json.loads((DATA_DIR / f"{name}.json").read_text(encoding="utf-8"))


def store_timezone():
    name = os.environ.get(TZ_ENV, DEFAULT_TZ)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        if name == DEFAULT_TZ:  # no tz database on this machine; Japan has no DST
            return timezone(timedelta(hours=9), "JST")
        raise QueryError(f"{TZ_ENV}={name!r} is not a known time zone") from None


def store_today() -> date:
    return datetime.now(UTC).astimezone(store_timezone()).date()


def resolve_date(text: str | None, default: str = "tomorrow") -> date:
    """YYYY-MM-DD, or today / tomorrow / yesterday in the store's time zone."""
    text = (text or default).strip().lower()
    if text in DATE_WORDS:
        return store_today() + timedelta(days=DATE_WORDS[text])
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise QueryError(
            f"date {text!r} is neither YYYY-MM-DD nor one of today, tomorrow, yesterday"
        ) from None


def offset_of(day: date) -> int:
    return (day - store_today()).days


def on(offset: int) -> str:
    return (store_today() + timedelta(days=offset)).isoformat()


# --- CRM ----------------------------------------------------------------------------------------


def high_tendency_threshold() -> float:
    return float(load("customers")["highTendencyThreshold"])


def _customer_view(customer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in customer.items() if k != "phone"}


def customers_by_id() -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in load("customers")["customers"]}


def _filter(name: str | None) -> str | None:
    if not name:
        return None
    try:
        return FILTER_ALIASES[name.strip().lower()]
    except KeyError:
        raise QueryError(
            f"unknown filter {name!r}; known filters: {', '.join(sorted(FILTER_ALIASES))}"
        ) from None


def _rain_prone(customer: dict[str, Any], threshold: float) -> bool:
    return customer["cancel_tendency"]["rain"] >= threshold


def customers(filter_name: str | None = None, customer_id: str | None = None) -> dict[str, Any]:
    rows = load("customers")["customers"]
    answer: dict[str, Any] = {}
    if customer_id:
        rows = [c for c in rows if c["id"] == customer_id.strip().upper()]
    if _filter(filter_name) == RAIN_FILTER:
        threshold = high_tendency_threshold()
        rows = sorted(
            (c for c in rows if _rain_prone(c, threshold)),
            key=lambda c: -c["cancel_tendency"]["rain"],
        )
        answer |= {"filter": RAIN_FILTER, "threshold": threshold}
    return {**answer, "count": len(rows), "customers": [_customer_view(c) for c in rows]}


def reservations(
    day_text: str | None, filter_name: str | None = None, status: str | None = None
) -> dict[str, Any]:
    day = resolve_date(day_text)
    offset = offset_of(day)
    people = customers_by_id()
    rows = [r for r in load("reservations")["reservations"] if r["dayOffset"] == offset]
    answer: dict[str, Any] = {"date": day.isoformat()}
    if status:
        rows = [r for r in rows if r["status"] == status]
    if _filter(filter_name) == RAIN_FILTER:
        threshold = high_tendency_threshold()
        rows = [r for r in rows if _rain_prone(people[r["customerId"]], threshold)]
        answer |= {"filter": RAIN_FILTER, "threshold": threshold}
    listed = []
    for r in sorted(rows, key=lambda r: (r["time"], r["id"])):
        person = people[r["customerId"]]
        listed.append(
            {
                "id": r["id"],
                "date": day.isoformat(),
                "time": r["time"],
                "partySize": r["partySize"],
                "course": r["course"],
                "status": r["status"],
                "channel": r["channel"],
                "customer": {"id": person["id"], "name": person["name"], "email": person["email"]},
            }
        )
    confirmed = [r for r in listed if r["status"] == "confirmed"]
    return {
        **answer,
        "count": len(listed),
        "confirmed": len(confirmed),
        "covers": sum(r["partySize"] for r in confirmed),
        "reservations": listed,
    }


# --- ERP, HR, weather, site, external -----------------------------------------------------------


def inventory(item: str | None = None) -> dict[str, Any]:
    rows = load("inventory")["items"]
    wanted = (item or "").strip()
    if wanted:
        lowered = wanted.lower()
        rows = [
            r for r in rows if lowered in (r["category"], r["sku"].lower()) or wanted in r["name"]
        ]
    items = []
    for r in rows:
        row = {k: v for k, v in r.items() if k != "expiresInDays"}
        row["expiresOn"] = on(r["expiresInDays"])
        row["expiresInDays"] = r["expiresInDays"]
        items.append(row)
    return {"item": wanted or "all", "asOf": on(0), "count": len(items), "items": items}


def staff(day_text: str | None, role: str | None = None) -> dict[str, Any]:
    day = resolve_date(day_text)
    key = str(offset_of(day))
    on_shift = []
    for person in load("staff")["staff"]:
        if key not in person["shifts"] or (role and person["role"] != role):
            continue
        on_shift.append(
            {
                "id": person["id"],
                "name": person["name"],
                "role": person["role"],
                "roleJa": person["roleJa"],
                "shift": person["shifts"][key],
            }
        )
    return {"date": day.isoformat(), "count": len(on_shift), "staff": on_shift}


def forecast(day_text: str | None) -> dict[str, Any]:
    day = resolve_date(day_text)
    data = load("weather")
    offset = offset_of(day)
    found = next((f for f in data["forecast"] if f["dayOffset"] == offset), None)
    if found is None:
        raise NotFound(f"no forecast for {day.isoformat()} (today {on(0)} -1 … +3 days)")
    body = {k: v for k, v in found.items() if k != "dayOffset"}
    return {
        "area": data["area"],
        "date": day.isoformat(),
        **body,
        "rain": body["condition"] == "rain",
    }


def site_stats(days: int = 7) -> dict[str, Any]:
    data = load("site_stats")
    if not 1 <= days <= len(data["daily"]):
        raise QueryError(f"days must be between 1 and {len(data['daily'])}")
    daily = [
        {"date": on(d["dayOffset"]), **{k: v for k, v in d.items() if k != "dayOffset"}}
        for d in sorted(data["daily"], key=lambda d: d["dayOffset"])[-days:]
    ]
    totals = {
        key: sum(d[key] for d in daily)
        for key in ("pageViews", "uniqueVisitors", "bookingPageViews", "bookings", "cancellations")
    }
    totals["bookingConversionRate"] = round(totals["bookings"] / totals["bookingPageViews"], 4)
    totals["cancellationRate"] = round(totals["cancellations"] / totals["bookings"], 4)
    return {
        "site": data["site"],
        "shopPage": data["shopPage"],
        "period": {"from": daily[0]["date"], "to": daily[-1]["date"], "days": days},
        "totals": totals,
        "daily": daily,
        "topReferrers": data["topReferrers"],
        "topKeywords": data["topKeywords"],
    }


def supplier_stock(item: str | None = None) -> dict[str, Any]:
    rows = load("external")["supplier_stock"]
    if item:
        rows = [r for r in rows if item in r["item"]]
    return {"source": "supplier_stock", "asOf": on(0), "count": len(rows), "items": rows}


def local_events(day_text: str | None) -> dict[str, Any]:
    day = resolve_date(day_text)
    offset = offset_of(day)
    rows = [
        {k: v for k, v in e.items() if k != "dayOffset"}
        for e in load("external")["local_events"]
        if e["dayOffset"] == offset
    ]
    return {"source": "local_events", "date": day.isoformat(), "count": len(rows), "events": rows}
