"""The LLM adapter (`agents.llm`) and the scripted model (`agents.scripted`), both through
litellm; and litellm's real HTTP path against a local OpenAI-compatible server."""

import asyncio
import json
import os
import textwrap

import litellm
import pytest

from agents import scripted
from agents.llm import (
    LLMError,
    LLMReply,
    ToolCall,
    Usage,
    complete,
    register_scripted_provider,
    tool_spec,
)
from tests.agents.openai_stub import (
    error_response,
    openai_stub,
    slow,
    text_response,
    tool_call_response,
)

SCRIPT = """
agents:
  info-gathering-agent:
    - tool_calls:
        - {name: fetch_web_content, arguments: {url: "http://weather.test/tomorrow"}}
        - {name: query_crm, arguments: {filter: rain_cancel_tendency}}
    - expect: {tool_results_contain: ["rain", "customers"]}
      text: "Rain tomorrow; 12 customers at risk."
  planning-agent:
    - expect: {user_contains: ["12 customers"]}
      json: {plan: {steps: [notify, reschedule]}}
  checker-agent:
    - tool_calls:
        - {name: send_mail, arguments: {to: ops}}
    - expect: {tool_errors: true}
      text: "The mail was refused."
  clean-agent:
    - tool_calls:
        - {name: send_mail, arguments: {to: ops}}
    - expect: {tool_errors: false}
      text: "Sent."
  broken-json-agent:
    - tool_calls:
        - {name: query_crm, arguments: '{"filter": '}
"""

WEATHER = "weather: rain 80%"
CRM = '{"result": {"customers": 12}}'


@pytest.fixture(autouse=True)
def scripts(settings, tmp_path):
    settings.MCPLET_SCRIPT_DIRS = [tmp_path]
    (tmp_path / "reference.yaml").write_text(SCRIPT)
    scripted.reset_attempts()
    yield tmp_path
    scripted.reset_attempts()


def write(directory, name, text):
    (directory / name).write_text(textwrap.dedent(text))


def user(text="What about tomorrow's bookings?"):
    return [
        {"role": "system", "content": "You gather information."},
        {"role": "user", "content": text},
    ]


def tool_results(reply: LLMReply, *contents: str) -> list[dict]:
    return [
        {"role": "tool", "tool_call_id": call.id, "content": content}
        for call, content in zip(reply.tool_calls, contents, strict=True)
    ]


def play(messages, agent, **kwargs):
    kwargs.setdefault("backoff", 0)
    return complete(messages, model="scripted/reference", agent_id=agent, **kwargs)


# --- the scripted model -----------------------------------------------------------------------


def test_tool_calls_then_text():
    messages = user()
    first = play(messages, "info-gathering-agent")
    assert first.text is None
    assert first.finish_reason == "tool_calls"
    assert first.tool_calls == [
        ToolCall(
            "call_info-gathering-agent_1_1",
            "fetch_web_content",
            {"url": "http://weather.test/tomorrow"},
        ),
        ToolCall("call_info-gathering-agent_1_2", "query_crm", {"filter": "rain_cancel_tendency"}),
    ]
    assert first.model == "scripted/reference"
    # The assistant message is ready for the transcript, in OpenAI format.
    assert first.raw_message == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_info-gathering-agent_1_1",
                "type": "function",
                "function": {
                    "name": "fetch_web_content",
                    "arguments": '{"url": "http://weather.test/tomorrow"}',
                },
            },
            {
                "id": "call_info-gathering-agent_1_2",
                "type": "function",
                "function": {
                    "name": "query_crm",
                    "arguments": '{"filter": "rain_cancel_tendency"}',
                },
            },
        ],
    }

    messages += [first.raw_message, *tool_results(first, WEATHER, CRM)]
    second = play(messages, "info-gathering-agent")
    assert second.text == "Rain tomorrow; 12 customers at risk."
    assert second.tool_calls == []
    assert second.finish_reason == "stop"
    assert second.raw_message == {"role": "assistant", "content": second.text}


def test_json_answer_is_serialised_into_the_text():
    reply = play(user("Plan for: 12 customers at risk."), "planning-agent")
    assert json.loads(reply.text) == {"plan": {"steps": ["notify", "reschedule"]}}
    assert reply.tool_calls == []


def test_replies_and_ids_are_deterministic():
    assert play(user(), "info-gathering-agent") == play(user(), "info-gathering-agent")


def test_a_resumed_conversation_continues_at_its_turn():
    """No state in the model: the turn is the number of assistant messages so far."""
    first = play(user(), "info-gathering-agent")
    transcript = json.loads(json.dumps([*user(), first.raw_message]))  # as stored on a run
    transcript += tool_results(first, WEATHER, CRM)
    assert play(transcript, "info-gathering-agent").text.startswith("Rain tomorrow")


def test_usage_is_estimated_deterministically():
    messages = user()
    reply = play(messages, "info-gathering-agent")
    prompt = sum(len(m["content"]) for m in messages) // 4
    calls = "".join(
        c["function"]["name"] + c["function"]["arguments"] for c in reply.raw_message["tool_calls"]
    )
    assert reply.usage == Usage(prompt, len(calls) // 4, prompt + len(calls) // 4)
    assert reply.usage.total_tokens > 0


def test_the_model_string_defaults_to_the_setting(settings):
    settings.MCPLET_LLM_MODEL = "scripted/reference"
    assert complete(user(), agent_id="info-gathering-agent").tool_calls


def test_unparseable_arguments_keep_the_raw_string():
    reply = play(user(), "broken-json-agent")
    assert reply.tool_calls[0].arguments == {}
    assert reply.tool_calls[0].arguments_error == '{"filter": '
    assert reply.raw_message["tool_calls"][0]["function"]["arguments"] == '{"filter": '


@pytest.mark.parametrize(
    ("agent", "results", "text"),
    [
        ("checker-agent", ['{"error": {"code": "DENIED", "message": "no"}}'], "refused"),
        ("clean-agent", ['{"result": {"sent": true}}'], "Sent."),
    ],
)
def test_expect_tool_errors_met(agent, results, text):
    first = play(user(), agent)
    assert text in play([*user(), first.raw_message, *tool_results(first, *results)], agent).text


@pytest.mark.parametrize(
    ("agent", "results", "message"),
    [
        ("checker-agent", ['{"result": {"sent": true}}'], "expected tool_errors=true"),
        ("clean-agent", ['{"error": {"code": "DENIED"}}'], "expected tool_errors=false"),
        ("info-gathering-agent", ["weather: sunny", CRM], "to contain 'rain'"),
    ],
)
def test_expect_not_met_fails_loudly(agent, results, message):
    first = play(user(), agent)
    messages = [*user(), first.raw_message, *tool_results(first, *results)]
    with pytest.raises(LLMError, match=message) as info:
        play(messages, agent, max_retries=2)
    assert info.value.retryable is False
    assert info.value.attempts == 1
    assert info.value.kind == "script"
    assert "left its script" in info.value.message


def test_a_refusal_that_breaks_an_expectation_is_carried_as_itself():
    """The tool's error, not the script's words, is what the run ends with (agents.runner)."""
    refused = '{"error": {"code": "X_ACCESS_DENIED", "message": "not granted (§3.4)"}}'
    first = play(user(), "clean-agent")
    messages = [*user(), first.raw_message, *tool_results(first, refused)]
    with pytest.raises(LLMError) as info:
        play(messages, "clean-agent")
    assert info.value.tool_error == {"code": "X_ACCESS_DENIED", "message": "not granted (§3.4)"}
    with pytest.raises(LLMError) as ran_out:  # the script ends: no tool's error to blame
        play([*messages, {"role": "assistant", "content": "Sent."}], "clean-agent")
    assert ran_out.value.tool_error is None and "has no turn 3" in ran_out.value.message


def test_expect_looks_only_at_the_results_since_the_last_turn(scripts):
    write(
        scripts,
        "late.yaml",
        """
        agents:
          a:
            - tool_calls: [{name: t1}]
            - tool_calls: [{name: t2}]
            - expect: {tool_results_contain: rain}
              text: done
        """,
    )
    messages = user()
    for result in ("rain", "sun"):
        reply = complete(messages, model="scripted/late", agent_id="a")
        messages += [reply.raw_message, *tool_results(reply, result)]
    with pytest.raises(LLMError, match="to contain 'rain', got 'sun'"):
        complete(messages, model="scripted/late", agent_id="a")


def test_expect_user_contains_not_met():
    with pytest.raises(LLMError, match="user messages to contain '12 customers'"):
        play(user("Plan something."), "planning-agent")


@pytest.mark.parametrize(
    ("model", "agent", "history", "message"),
    [
        ("scripted/missing", "a", 0, r"'missing': no script missing\.yaml/\.yml/\.json"),
        ("scripted/../reference", "a", 0, "not a script name"),
        ("scripted/reference", "nobody", 0, "agent nobody is not in reference.yaml"),
        ("scripted/reference", "", 0, "no agent_id"),
        (
            "scripted/reference",
            "planning-agent",
            1,
            r"scripted model 'reference': agent planning-agent has no turn 2 "
            r"\(its script has 1; the conversation left its script\)",
        ),
    ],
)
def test_leaving_the_script_fails_loudly_and_is_not_retried(model, agent, history, message):
    messages = user("12 customers") + [{"role": "assistant", "content": "x"}] * history
    with pytest.raises(LLMError, match=message) as info:
        complete(messages, model=model, agent_id=agent, max_retries=2, backoff=0)
    assert info.value.retryable is False
    assert info.value.attempts == 1
    assert info.value.kind == "script"
    assert "litellm" not in info.value.message  # the script's own words, not litellm's wrapping


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("agents: [a, b]", "has no `agents:` mapping"),
        ("agents: {a: [{text: hi, say: x}]}", r"unknown keys \['say'\]"),
        ("agents: {a: [{expect: {tool_result: x}, text: hi}]}", "unknown expect keys"),
        ("agents: {a: [{json: {}, text: hi}]}", "`json` answers alone"),
        ("agents: {a: [{delay: 0}]}", "needs `tool_calls`, `text` or `json`"),
        ("agents: {a: [{tool_calls: [{arguments: {}}]}]}", "needs a `name`"),
        ("agents: {a: [{error: {kind: flood}, text: hi}]}", "`error` needs a kind"),
        ("agents: {a: [{text: hi}", "cannot read"),
    ],
)
def test_a_malformed_script_fails_loudly(scripts, text, message):
    (scripts / "bad.yaml").write_text(text)
    with pytest.raises(LLMError, match=message) as info:
        complete(user(), model="scripted/bad", agent_id="a", backoff=0)
    assert info.value.retryable is False


def test_arguments_name_only_the_script_variables(scripts, settings, monkeypatch):
    """`${NAME}` is what settings.MCPLET_SCRIPT_VARIABLES says, never the environment's."""
    settings.MCPLET_SCRIPT_VARIABLES = {"API": "http://127.0.0.1:5301"}
    call = {"name": "fetch", "arguments": {"url": "${API}/forecast", "also": ["${API}"]}}
    (scripts / "vars.yaml").write_text(json.dumps({"agents": {"a": [{"tool_calls": [call]}]}}))
    (reply_call,) = complete(user(), model="scripted/vars", agent_id="a").tool_calls
    assert reply_call.arguments == {
        "url": "http://127.0.0.1:5301/forecast",
        "also": ["http://127.0.0.1:5301"],
    }
    monkeypatch.setenv("SECRET_KEY", "not-for-a-script")
    call["arguments"] = {"leak": "${SECRET_KEY}"}
    (scripts / "vars.yaml").write_text(json.dumps({"agents": {"a": [{"tool_calls": [call]}]}}))
    with pytest.raises(LLMError, match=r"\$\{SECRET_KEY\} is not in MCPLET_SCRIPT_VARIABLES"):
        complete(user(), model="scripted/vars", agent_id="a", backoff=0)


def test_json_scripts_are_read_too(scripts):
    (scripts / "plain.json").write_text(json.dumps({"agents": {"a": [{"text": "from json"}]}}))
    assert complete(user(), model="scripted/plain", agent_id="a").text == "from json"


@pytest.mark.parametrize("kind", ["timeout", "rate_limit", "server", "unavailable", "connection"])
def test_a_transient_error_is_retried_then_succeeds(scripts, kind):
    write(
        scripts,
        "flaky.yaml",
        f"""
        agents:
          a:
            - error: {{kind: {kind}, times: 2}}
              text: finally
        """,
    )
    delays = []
    reply = complete(
        user(),
        model="scripted/flaky",
        agent_id="a",
        max_retries=2,
        backoff=0.5,
        sleep=delays.append,
    )
    assert reply.text == "finally"
    assert reply.attempts == 3
    assert delays == [0.5, 1.0]  # backoff * 2**n


def test_retries_are_bounded_and_a_failure_consumes_no_turn(scripts):
    write(
        scripts,
        "flaky.yaml",
        """
        agents:
          a:
            - error: {kind: rate_limit, times: 3}
              text: finally
        """,
    )
    with pytest.raises(LLMError, match="gave up after 3 attempts") as info:
        complete(user(), model="scripted/flaky", agent_id="a", max_retries=2, backoff=0)
    assert info.value.retryable is True
    assert info.value.attempts == 3
    assert info.value.kind == "rate_limit"
    assert "RateLimitError" in info.value.message
    # The turn is still the first one: the next call plays it.
    assert complete(user(), model="scripted/flaky", agent_id="a", max_retries=0).text == "finally"


def test_error_turns_count_per_run(scripts):
    write(scripts, "flaky.yaml", "agents: {a: [{error: {kind: server}, text: ok}]}")
    for run_id in ("run-1", "run-2"):
        with pytest.raises(LLMError, match="InternalServerError"):
            complete(
                user(),
                model="scripted/flaky",
                agent_id="a",
                max_retries=0,
                metadata={"run_id": run_id},
            )


def test_a_turn_slower_than_the_timeout_times_out(scripts):
    write(scripts, "slow.yaml", "agents: {a: [{delay: 5, text: late}, {delay: 0.01, text: quick}]}")
    with pytest.raises(LLMError, match="Timeout") as info:
        complete(
            user(), model="scripted/slow", agent_id="a", timeout=0.05, max_retries=1, backoff=0
        )
    assert info.value.retryable is True
    assert info.value.attempts == 2
    assert info.value.kind == "timeout"
    messages = [*user(), {"role": "assistant", "content": "late"}]
    assert complete(messages, model="scripted/slow", agent_id="a", timeout=1).text == "quick"


def test_litellm_async_path_plays_the_script_too():
    register_scripted_provider()  # complete() does it; a direct litellm call must do it first
    response = asyncio.run(
        litellm.acompletion(
            model="scripted/reference",
            messages=user(),
            metadata={"agent_id": "info-gathering-agent"},
        )
    )
    assert response.choices[0].finish_reason == "tool_calls"
    assert response.choices[0].message.tool_calls[0].id == "call_info-gathering-agent_1_1"


def test_the_scripted_provider_is_registered_once_beside_others():
    other = {"provider": "other-model", "custom_handler": litellm.CustomLLM()}
    litellm.custom_provider_map.append(other)
    try:
        register_scripted_provider()
        register_scripted_provider()
        providers = [item["provider"] for item in litellm.custom_provider_map]
        assert providers.count("scripted") == 1
        assert "other-model" in providers
    finally:
        litellm.custom_provider_map.remove(other)


def test_litellm_stays_offline():
    complete(user(), model="scripted/reference", agent_id="info-gathering-agent")
    assert os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert getattr(litellm, "telemetry", False) is False


def test_tool_spec_is_openai_tool_format():
    schema = {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}
    assert tool_spec("fetch_web_content", "Fetch a page.", schema) == {
        "type": "function",
        "function": {
            "name": "fetch_web_content",
            "description": "Fetch a page.",
            "parameters": schema,
        },
    }
    assert tool_spec("ping", None, None)["function"]["parameters"] == {
        "type": "object",
        "properties": {},
    }


# --- litellm's real HTTP path ---------------------------------------------------------------

TOOLS = [
    tool_spec(
        "query_crm",
        "Query the CRM.",
        {"type": "object", "properties": {"filter": {"type": "string"}}},
    )
]


def call_stub(url, messages, **kwargs):
    kwargs.setdefault("backoff", 0)
    return complete(
        messages,
        model="openai/stub-model",
        tools=TOOLS,
        api_base=url,
        api_key="sk-test",
        agent_id="info-gathering-agent",
        timeout=10,
        **kwargs,
    )


def test_openai_http_tool_call_then_text():
    answers = [
        tool_call_response("query_crm", {"filter": "rain"}, call_id="call_abc"),
        text_response("12 customers at risk."),
    ]
    with openai_stub(answers) as (url, requests):
        messages = user()
        first = call_stub(url, messages)
        assert first.tool_calls == [ToolCall("call_abc", "query_crm", {"filter": "rain"})]
        assert first.usage == Usage(21, 7, 28)
        assert first.finish_reason == "tool_calls"
        messages += [first.raw_message, *tool_results(first, CRM)]
        second = call_stub(url, messages)

    assert second.text == "12 customers at risk."
    assert second.tool_calls == []
    assert len(requests) == 2
    sent = requests[0]["json"]
    assert requests[0]["path"] == "/v1/chat/completions"
    assert requests[0]["headers"]["Authorization"] == "Bearer sk-test"
    assert sent["model"] == "stub-model"
    assert sent["tools"] == TOOLS
    assert sent["messages"] == user()
    # The transcript went back as sent: the assistant's tool call, then its result.
    later = requests[1]["json"]["messages"]
    assert later[2]["tool_calls"][0]["id"] == "call_abc"
    assert later[2]["tool_calls"][0]["function"] == {
        "name": "query_crm",
        "arguments": '{"filter": "rain"}',
    }
    assert later[3] == {"role": "tool", "tool_call_id": "call_abc", "content": CRM}


def test_openai_http_unparseable_arguments():
    with openai_stub([tool_call_response("query_crm", "{oops")]) as (url, _):
        call = call_stub(url, user()).tool_calls[0]
    assert (call.arguments, call.arguments_error) == ({}, "{oops")


@pytest.mark.parametrize("status", [500, 429, 503])
def test_openai_http_transient_error_is_retried(status):
    with openai_stub([error_response(status, retry_after="0"), text_response("ok")]) as (
        url,
        requests,
    ):
        reply = call_stub(url, user(), max_retries=2)
    assert reply.text == "ok"
    assert reply.attempts == 2
    assert len(requests) == 2  # one per attempt: no hidden retries inside litellm or the SDK


def test_openai_http_gives_up_after_max_retries():
    stub = openai_stub([error_response(500)] * 3)
    with stub as (url, requests), pytest.raises(LLMError, match="gave up after 3") as info:
        call_stub(url, user(), max_retries=2)
    assert info.value.retryable is True
    assert info.value.kind == "server"
    assert len(requests) == 3


def test_openai_http_authentication_error_is_not_retried():
    stub = openai_stub([error_response(401, "bad key"), text_response("never")])
    with stub as (url, requests), pytest.raises(LLMError, match="AuthenticationError") as info:
        call_stub(url, user(), max_retries=2)
    assert info.value.retryable is False
    assert info.value.attempts == 1
    assert info.value.kind == "auth"
    assert len(requests) == 1


def test_openai_http_bad_request_is_not_retried():
    stub = openai_stub([error_response(400, "bad tools")])
    with stub as (url, requests), pytest.raises(LLMError, match="BadRequestError") as info:
        call_stub(url, user(), max_retries=2)
    assert info.value.retryable is False
    assert info.value.kind == "bad_request"
    assert len(requests) == 1


def test_openai_http_timeout_is_retried():
    answers = [slow(2, text_response("too late")), text_response("in time")]
    with openai_stub(answers) as (url, requests):
        reply = complete(
            user(),
            model="openai/stub-model",
            api_base=url,
            api_key="sk-test",
            timeout=0.3,
            max_retries=1,
            backoff=0,
        )
    assert reply.text == "in time"
    assert reply.attempts == 2
    assert len(requests) == 2
