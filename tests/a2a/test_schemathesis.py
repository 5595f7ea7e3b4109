"""Schemathesis against the partner API's own OpenAPI schema (`/api/schema/`), over real HTTP
(Django's live server): no request gets a 5xx, and no response breaks what the schema documents
(status code, content type, body schema).

Two sources of requests: Schemathesis generates them from the schema (positive and negative
data, `MAX_EXAMPLES` per operation and mode; the negative ones include a missing key), and a
fixed list walks every documented response of every operation (a task that answers, one that
waits for an approval, resubmission, cancel, each 4xx) so that the 2xx paths, which random
bodies never reach, are checked against the schema too.

A third, stateful: Schemathesis's state machine chains the operations along the links it infers
from the schema (a task's messageId into its status and cancel), STATEFUL_REQUESTS requests in
all (150 here; `make schemathesis-stateful` sends 1,000), with the same checks and Schemathesis's
own stateful ones (a created task can be read back; a cancelled one stays readable).
"""

import collections
import os
from datetime import timedelta
from urllib.parse import unquote, urlsplit

import httpx
import pytest
from django.urls import Resolver404, resolve

from a2a import messages
from a2a.api import MAX_BODY, PartnerRateThrottle
from a2a.models import PartnerKey
from agents.models import Agent
from mcplet_host import ratelimit

# A test dependency (with Hypothesis, which it brings): `pip install schemathesis`. Skipped
# without it on a laptop; in CI, which runs every test, a missing schemathesis fails the run.
if not os.environ.get("CI"):
    pytest.importorskip("schemathesis")
import schemathesis  # noqa: E402
from hypothesis import HealthCheck, Phase, given  # noqa: E402
from hypothesis import settings as hypothesis_settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.core.failures import FailureGroup  # noqa: E402
from schemathesis.generation.stateful import run_state_machine_as_test  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    ensure_resource_availability,
    response_schema_conformance,
    status_code_conformance,
    use_after_free,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
MAX_EXAMPLES = 25  # per operation and generation mode
DEADLINE = timedelta(seconds=5)  # per generated request (they take milliseconds)
TIMEOUT = 10  # seconds, per HTTP request
STATEFUL_REQUESTS = int(os.environ.get("STATEFUL_REQUESTS", "150"))
STATEFUL_STEPS = 10  # per scenario
EMAIL = {"tool": "send_email", "arguments": {"to": ["sato@example.jp"], "body": "Hi"}}


@pytest.fixture
def partner_key(registry, script, settings, monkeypatch):
    """A partner that may call the info agent (which answers at once) and the dispatch agent
    (which stops for an approval of send_email)."""
    partner = registry["partner"]
    partner.callable_agents.set([registry["info"], registry["dispatch"]])
    partner.accessible_pools.set([registry["info-pool"], registry["media-pool"]])
    # One scripted turn per run: the turn played is the number of assistant messages already
    # in that run's conversation, so every run of an agent plays its first (and only) turn.
    model = script(
        {
            "info-gathering-agent": [{"json": {"ok": True}}],
            "dispatch-agent": [{"json": {"actions": [EMAIL]}}],
        }
    )
    for name in ("info", "dispatch"):
        registry[name].model = model
        registry[name].save()
    settings.MCPLET_A2A_WAIT = 1
    monkeypatch.setattr(PartnerRateThrottle, "rate", "100000/min", raising=False)
    _, raw = PartnerKey.issue(partner, "schemathesis")
    return raw


@pytest.fixture
def schema(live_server):
    return schemathesis.openapi.from_url(
        f"{live_server.url}/api/schema/", headers={"Accept": "application/json"}
    )


def routed(response):
    """Whether the request reached a view: a path no URL pattern matches (a negative path
    parameter such as /a2a/tasks/not-a-uuid) gets Django's own HTML 404, not the API's."""
    try:
        resolve(unquote(urlsplit(str(response.request.url)).path))
    except Resolver404:
        return False
    return True


def failures_of(case, response, headers, extra=(), recorder=None):
    checks = (
        [*CHECKS, *extra] if routed(response) else [not_a_server_error, status_code_conformance]
    )
    try:
        case.validate_response(response, checks=checks, headers=headers, recorder=recorder)
    except FailureGroup as exc:
        return [str(exc)]
    return []


def test_generated_requests_get_no_5xx_and_match_the_schema(live_server, partner_key, schema):
    auth = {"Authorization": f"Bearer {partner_key}"}
    failures, statuses = [], {}

    def send(case):
        response = case.call(base_url=live_server.url, headers=auth, timeout=TIMEOUT)
        statuses.setdefault(case.operation.label, set()).add(response.status_code)
        failures.extend(failures_of(case, response, auth))

    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 6
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @hypothesis_settings(
                max_examples=MAX_EXAMPLES,
                deadline=DEADLINE,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            def fuzz(case):
                send(case)

            try:
                fuzz()
            except Unsatisfiable:  # nothing to negate: no parameters and no body
                assert mode == GenerationMode.NEGATIVE, operation.label
    assert not failures, "\n\n".join(failures[:5]) + f"\n\n({len(failures)} in all)"
    assert not any(code >= 500 for codes in statuses.values() for code in codes), statuses
    assert statuses["GET /a2a/agents"] >= {200, 401}  # the negative data drop the key


def test_every_documented_response_matches_the_schema(live_server, partner_key, schema):
    auth = {"Authorization": f"Bearer {partner_key}"}
    failures, seen = [], set()

    def send(label, expected, *, headers=auth, raw=None, **data):
        """One request by Schemathesis (or raw bytes by httpx), checked against the schema."""
        method, path = label.split(" ", 1)
        case = schema[path][method].Case(**data)
        if raw is None:
            response = case.call(base_url=live_server.url, headers=headers, timeout=TIMEOUT)
        else:
            content, content_type = raw
            response = httpx.request(
                method,
                live_server.url + case.formatted_path,
                content=content,
                headers={**headers, "Content-Type": content_type},
                timeout=TIMEOUT,
            )
        failures.extend(failures_of(case, response, headers))
        assert response.status_code == expected, (label, response.status_code, response.text)
        seen.add((label, expected))
        return response.json()

    def task(recipient="info-gathering-agent", sender="partner-bot", **parameters):
        return messages.task_request(sender, recipient, parameters or {"store": "shinjuku"})

    tasks, task_id = "POST /a2a/tasks", "GET /a2a/tasks/{message_id}"
    cancel = "POST /a2a/tasks/{message_id}/cancel"

    answered = task()
    assert send(tasks, 200, body=answered)["status"] == "success"
    assert send(tasks, 200, body=answered)["replyToMessageId"] == answered["messageId"]
    ids = {"message_id": answered["messageId"]}
    assert send(task_id, 200, path_parameters=ids)["status"] == "success"
    send(cancel, 409, path_parameters=ids)  # already answered
    other = Agent.objects.create(agent_id="other-bot", display_name="Other", kind="external")
    other_auth = {"Authorization": f"Bearer {PartnerKey.issue(other, 'x')[1]}"}
    stolen = {**answered, "senderId": "other-bot"}  # another partner's messageId
    send(tasks, 404, body=stolen, headers=other_auth)

    waiting = task("dispatch-agent")
    assert send(tasks, 202, body=waiting)["state"] == "awaiting_approval"
    ids = {"message_id": waiting["messageId"]}
    assert send(task_id, 202, path_parameters=ids)["awaiting"]["tool"] == "send_email"
    assert send(cancel, 200, path_parameters=ids)["status"] == "cancelled"

    unknown = {"message_id": messages.new_id()}
    send(task_id, 404, path_parameters=unknown)
    send(cancel, 404, path_parameters=unknown)
    for body in (
        task(sender="info-gathering-agent"),
        task("planning-agent"),
        task(pools=["no-such-pool"]),
        task(tools=["read_site_stats"]),  # the info agent holds no media-pool
    ):
        send(tasks, 403, body=body)
    send(tasks, 400, body={**task(), "type": "task_response"})
    send(tasks, 400, raw=(b'{"messageId": ', "application/json"))
    send(tasks, 415, raw=(b"messageId=1", "text/plain"))
    send(tasks, 413, raw=(b"[" + b"0," * MAX_BODY + b"0]", "application/json"))

    send("GET /a2a/agents", 200)
    send("GET /a2a/agents/{agent_id}", 200, path_parameters={"agent_id": "dispatch-agent"})
    send("GET /a2a/agents/{agent_id}", 404, path_parameters={"agent_id": "planning-agent"})
    card = messages.agent_card("partner-bot", "Partner", requested_pools=["info-pool"])
    own = "PUT /a2a/agents/me"
    assert send(own, 200, body=card)["grantedPools"] == ["info-pool", "media-pool"]
    send(own, 403, body={**card, "agentId": "someone-else"})
    send(own, 400, body={**card, "powers": "all"})
    send(own, 415, raw=(b"agentId=partner-bot", "application/x-www-form-urlencoded"))
    send(own, 413, raw=(b'{"x": "' + b"x" * MAX_BODY + b'"}', "application/json"))

    unserved = {**auth, "Host": "5"}  # a Host this server does not serve: refused before any view
    send("GET /a2a/agents", 400, headers=unserved)
    send("GET /a2a/agents/{agent_id}", 400, headers=unserved, path_parameters={"agent_id": "x"})
    send(task_id, 400, headers=unserved, path_parameters=unknown)
    send(cancel, 400, headers=unserved, path_parameters=unknown)
    send("GET /a2a/agents", 401, headers={})
    send("GET /a2a/agents", 401, headers={"Authorization": "Bearer mcpk_notAKeyAtAll"})
    PartnerRateThrottle.rate = "1/min"  # (monkeypatched: restored after the test)
    ratelimit.forget(PartnerRateThrottle.name("partner-bot"), 60)
    send("GET /a2a/agents", 200)
    error = send("GET /a2a/agents", 429)["error"]
    assert error["code"] == "RATE_LIMITED" and error["retry_after_ms"] > 0

    assert not failures, "\n\n".join(failures)
    documented = {
        (operation.label, int(code))
        for operation in (result.ok() for result in schema.get_all_operations())
        for code in operation.responses.status_codes
    }
    # Every documented response was produced, except the 401 and 429 of each operation
    # (one each is enough: the same authentication and throttle serve every operation).
    missing = {(label, code) for label, code in documented - seen if code not in (401, 429)}
    assert not missing, sorted(missing)


def test_stateful_sequences_get_no_5xx_and_match_the_schema(live_server, partner_key, schema):
    auth = {"Authorization": f"Bearer {partner_key}"}
    failures, sent = [], collections.Counter()
    for agent in ("info-gathering-agent", "dispatch-agent"):  # each agent's first run loads
        httpx.post(  # its model and tools: not a request of the run, which times each one
            f"{live_server.url}/a2a/tasks",
            json=messages.task_request("partner-bot", agent, {"store": "warm-up"}),
            headers=auth,
            timeout=60,
        ).raise_for_status()

    @schema.hook
    def before_generate_body(context, strategy):
        """A generated task is nearly always refused (its senderId is not the partner): a share
        of well-formed tasks to the partner's agents gives the links a task to follow."""
        if context.operation is None or context.operation.label != "POST /a2a/tasks":
            return strategy
        agents = st.sampled_from(["info-gathering-agent", "dispatch-agent"])
        task = st.builds(
            messages.task_request,
            st.just("partner-bot"),
            agents,
            st.dictionaries(st.text(max_size=8), st.text(max_size=20), max_size=2),
        )
        return strategy | task

    class PartnerAPI(schema.as_state_machine()):
        def get_call_kwargs(self, case):
            return {"base_url": live_server.url, "headers": auth, "timeout": TIMEOUT}

        def validate_response(self, response, case, **kwargs):
            sent[(case.operation.label, response.status_code)] += 1
            stateful = (use_after_free, ensure_resource_availability)
            failures.extend(failures_of(case, response, auth, stateful, self.recorder))

    run_state_machine_as_test(
        PartnerAPI,
        settings=hypothesis_settings(
            max_examples=STATEFUL_REQUESTS // 4,
            stateful_step_count=STATEFUL_STEPS,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        ),
    )
    total = sum(sent.values())
    print(f"\nstateful: {total} requests, {dict(sorted(sent.items()))}")
    assert not failures, "\n\n".join(failures[:5]) + f"\n\n({len(failures)} in all)"
    assert total >= STATEFUL_REQUESTS, sent
    assert not any(code >= 500 for _, code in sent)
    # The links were followed: a task sent in a scenario was read back and cancelled by its id.
    assert sent["GET /a2a/tasks/{message_id}", 200] + sent["GET /a2a/tasks/{message_id}", 202]
    assert sent["POST /a2a/tasks/{message_id}/cancel", 200]
