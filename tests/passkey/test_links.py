"""Where links to a held call come from (passkey.links): the running host publishes its origin
for every process of the installation; a process that serves the host's pages uses its own; no
running host, the configured PASSKEY_ORIGIN. And what a held call waits for, in words."""

import json
import os
import subprocess
import sys

import pytest

from held.models import Ceremony
from passkey import links
from tests.passkey.conftest import ORIGIN, url

pytestmark = pytest.mark.django_db

HOST = "http://localhost:8766"


@pytest.fixture
def command(monkeypatch):
    """This test process plays a command: it serves no pages."""
    monkeypatch.setattr(links, "_serving_pages", False)


def test_a_command_links_to_the_running_hosts_origin(held, settings, command):
    assert links.running_host() is None
    assert links.ceremony_url(held) == f"{ORIGIN}{url(held)}"  # no host runs: its settings

    record = links.publish(HOST + "/", HOST)
    assert links.serves_pages()  # the publisher is the host
    links._serving_pages = False  # (and this test goes on as a command)
    assert record["origin"] == HOST and record["pid"] == os.getpid()
    assert json.loads(settings.MCPLET_HOST_FILE.read_text())["origin"] == HOST
    assert links.running_host() == record
    assert links.origin() == HOST
    assert links.ceremony_url(held) == f"{HOST}{url(held)}"


def test_the_host_itself_links_to_its_own_origin(held, monkeypatch):
    links.publish(HOST, HOST)
    assert links.ceremony_url(held) == f"{ORIGIN}{url(held)}"  # its PASSKEY_ORIGIN


def test_a_host_that_stopped_is_not_linked_to(held, settings, command):
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    record = {"origin": HOST, "address": HOST, "pid": int(ended.stdout), "started": "x"}
    settings.MCPLET_HOST_FILE.write_text(json.dumps(record))
    assert links.running_host() is None
    assert links.ceremony_url(held) == f"{ORIGIN}{url(held)}"


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[]",
        json.dumps({"origin": HOST, "address": HOST}),  # no pid
        # "PID": this process's id, put in by the test (ids must not vary between workers)
        json.dumps({"origin": "javascript:alert(1)", "address": HOST, "pid": "PID"}),
        json.dumps({"origin": HOST, "address": "file:///etc/passwd", "pid": "PID"}),
        json.dumps({"origin": HOST, "address": HOST, "pid": "1"}),
        json.dumps({"origin": HOST, "address": HOST, "pid": True}),
        json.dumps({"origin": HOST, "address": HOST, "pid": -1}),
    ],
)
def test_a_file_that_is_not_a_hosts_record_is_ignored(content, settings, command):
    settings.MCPLET_HOST_FILE.write_text(content.replace('"PID"', str(os.getpid())))
    assert links.running_host() is None
    assert links.origin() == ORIGIN


def describe(ceremony, **changes):
    for name, value in changes.items():
        setattr(ceremony, name, value)
    return links.describe(ceremony), links.next_step(ceremony)


def test_what_a_held_call_waits_for_in_words(held, registry):
    assert describe(held) == ("an approval of the action send_email", "Approve or reject it")
    proposed = describe(held, proposed_by_model=True)
    assert proposed[0] == "an approval of send_email, which dispatch-agent's model proposed"
    held.proposed_by_model = False
    plan = describe(
        held, tool_name="approve_plan", mcplet=registry["server"].mcplets.get(name="approve_plan")
    )
    assert plan[0] == (
        "an approval of the prepare approve_plan, which its server asks a person to approve"
    )
    step = describe(held, kind=Ceremony.Kind.STEP_UP, tool_name="aaif.pwma.request")
    assert step == (
        "a step a person must take on the server reference's side before aaif.pwma.request "
        "is sent again",
        "Take the step, then say so (or cancel it)",
    )
    form = describe(held, kind=Ceremony.Kind.FORM, tool_name="book_table")
    assert form == (
        "a form the server reference asks a person to fill in during book_table",
        "Answer it (or decline)",
    )
    result = describe(held, kind=Ceremony.Kind.RESULT, agent_id="planning-agent")
    assert result == (
        "a confirmation of planning-agent's result, before it is handed on",
        "Confirm or reject it",
    )
