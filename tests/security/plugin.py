"""The adversarial suite's tally (registered by the root conftest, so that it also runs in the
xdist controller, which collects nothing): attempts per attack class, and executions the MCP
test servers logged for an attempt that expected a refusal. The session ends with one line,

    N attempts, M classes, 0 unauthorised executions

and fails if the last number is not 0. Under xdist each worker hands its tally to the
controller in `workeroutput`, which adds them up."""

import json
from collections import Counter

import pytest

KEY = "mcplet_security_tally"


class Tally:
    def __init__(self):
        self.attempts, self.unauthorised = Counter(), Counter()

    def add(self, other):
        self.attempts.update(other["attempts"])
        self.unauthorised.update(other["unauthorised"])

    def as_json(self):
        return json.dumps({"attempts": self.attempts, "unauthorised": self.unauthorised})

    def line(self):
        return (
            f"{sum(self.attempts.values())} attempts, {len(self.attempts)} classes, "
            f"{sum(self.unauthorised.values())} unauthorised executions"
        )


TALLY = Tally()


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller adds it up
        workeroutput[KEY] = TALLY.as_json()
    elif sum(TALLY.unauthorised.values()):
        session.exitstatus = 1


@pytest.hookimpl(optionalhook=True)  # an xdist hook: without xdist it is never called
def pytest_testnodedown(node, error):
    tally = getattr(node, "workeroutput", {}).get(KEY)
    if tally:
        TALLY.add(json.loads(tally))


def pytest_terminal_summary(terminalreporter):
    if TALLY.attempts:
        terminalreporter.write_line(TALLY.line())
