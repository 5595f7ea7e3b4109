"""The scripted reference scenario (agents/scripts/reference.yaml) against the data: its target
customers are exactly the guests the data puts at risk, and every agent's scripted answer
matches the output schema seed_reference gives that agent."""

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from django.conf import settings

from agents import llm
from agents.management.commands.seed_reference import (
    DISPATCH_OUTPUT,
    INFO_OUTPUT,
    PLANNING_OUTPUT,
)
from agents.scripted import load_script

DATA = Path(settings.BASE_DIR) / "mcplets" / "restaurant" / "data"
SCRIPT = Path(settings.BASE_DIR) / "agents" / "scripts" / "reference.yaml"
SCRIPT_API_URL = "${RESTAURANT_API_URL}"  # where the script fetches the forecast from


def data(name):
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))


def at_risk():
    """Recomputed from the files alone: rain forecast tomorrow, a confirmed reservation
    tomorrow, and a rain cancellation tendency at or above the CRM's threshold."""
    tomorrow = next(f for f in data("weather")["forecast"] if f["dayOffset"] == 1)
    assert tomorrow["condition"] == "rain"
    crm = data("customers")
    people = {c["id"]: c for c in crm["customers"]}
    rows = sorted(
        (r for r in data("reservations")["reservations"] if r["dayOffset"] == 1),
        key=lambda r: (r["time"], r["id"]),
    )
    return [
        {"name": people[r["customerId"]]["name"], "email": people[r["customerId"]]["email"]}
        for r in rows
        if r["status"] == "confirmed"
        and people[r["customerId"]]["cancel_tendency"]["rain"] >= crm["highTendencyThreshold"]
    ]


@pytest.fixture(scope="module")
def script():
    return yaml.safe_load(SCRIPT.read_text(encoding="utf-8"))["agents"]


def final_json(script, agent):
    return script[agent][-1]["json"]


def test_the_data_puts_ten_guests_at_risk():
    emails = [p["email"] for p in at_risk()]
    assert len(emails) == len(set(emails)) == 10
    # the near misses stay out: cancelled already, under the threshold, another day, no booking
    for left_out in ("yamada.yuko", "hayashi.megumi", "inoue.aya", "maeda.tsuyoshi", "mori.nana"):
        assert not any(e.startswith(left_out) for e in emails)


def test_the_plan_targets_exactly_the_guests_at_risk(script):
    expected = at_risk()
    plan = final_json(script, "planning-agent")["plan"]
    assert plan["targetCustomers"] == expected
    analysed = final_json(script, "info-gathering-agent")["rawData"]["atRiskCustomers"]
    assert [{"name": p["name"], "email": p["email"]} for p in analysed] == expected


def test_dispatch_sends_the_approved_text_to_exactly_those_guests(script):
    plan = final_json(script, "planning-agent")["plan"]
    (action,) = final_json(script, "dispatch-agent")["actions"]
    assert action["tool"] == "send_email"
    to = action["arguments"]["to"]
    assert to == [f"{p['name']} <{p['email']}>" for p in at_risk()]
    assert action["arguments"]["subject"] == plan["email"]["subject"]
    assert action["arguments"]["body"] == plan["email"]["body"]
    assert "{name}" in action["arguments"]["body"]


@pytest.mark.parametrize(
    "agent, schema",
    [
        ("info-gathering-agent", INFO_OUTPUT),
        ("planning-agent", PLANNING_OUTPUT),
        ("dispatch-agent", DISPATCH_OUTPUT),
    ],
)
def test_scripted_answers_match_the_seeded_output_schemas(script, agent, schema):
    jsonschema.validate(final_json(script, agent), schema)


def test_the_director_targets_the_information_agent(script):
    (turn,) = script["director"]
    assert turn["json"]["target"] == "info-gathering-agent" and turn["json"]["instruction"]


def test_the_script_fetches_from_this_hosts_backing_service(settings):
    """A second host on one machine sets RESTAURANT_API_URL (its backing service's own port):
    the reference script follows it, as the MCPlets and seed_reference do."""
    settings.MCPLET_SCRIPT_DIRS = [str(SCRIPT.parent)]
    settings.MCPLET_SCRIPT_VARIABLES = {"RESTAURANT_API_URL": "http://127.0.0.1:5301"}
    system = {"role": "system", "content": "gather"}
    reply = llm.complete(
        [system, {"role": "user", "content": "go"}],
        model="scripted/reference",
        agent_id="info-gathering-agent",
    )
    fetch = next(c for c in reply.tool_calls if c.name == "fetch_web_content")
    assert fetch.arguments == {"url": "http://127.0.0.1:5301/weather/forecast?date=tomorrow"}


def test_the_script_loads_as_the_scripted_model_reads_it(settings):
    settings.MCPLET_SCRIPT_DIRS = [str(SCRIPT.parent)]
    path, agents = load_script("reference")
    assert path == SCRIPT
    assert set(agents) == {"director", "info-gathering-agent", "planning-agent", "dispatch-agent"}
