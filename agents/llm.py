"""The LLM adapter: every LLM call of the host goes through `complete()`, i.e. through litellm,
with the model string from the agent (or `MCPLET_LLM_MODEL`): any provider litellm supports, with
tool calling, plus the offline `scripted/<name>` model (`agents.scripted`).

`complete()` adds what the agents need around litellm: a timeout per attempt, bounded retries with
exponential backoff for transient failures only, one exception type (`LLMError`) for the caller,
and the reply as plain data (`LLMReply`) with its token usage and the assistant message ready to
append to the transcript.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings

from mcplet_host import tracing

if TYPE_CHECKING:
    from agents.scripted import ScriptError

# Before litellm is imported: otherwise it fetches its model cost map from GitHub at import
# (litellm/litellm_core_utils/get_model_cost_map.py), and the host may have no internet.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "scripted/reference"


_loading = threading.Lock()


@functools.cache
def _litellm():
    """litellm, imported at the first LLM call (or as a worker starts: `load`) and kept
    offline. Importing it takes seconds, which every manage.py command and web process would
    otherwise pay at start-up without ever calling a model (bench/startup.py). One thread
    imports it; another waits rather than see a module half loaded."""
    with _loading:
        import litellm

        # No phoning home, no "Give Feedback / Get Help" banners in the logs.
        if hasattr(litellm, "telemetry"):
            litellm.telemetry = False
        litellm.suppress_debug_info = True
        return litellm


def load():
    """What the first LLM call would load, loaded now (a worker starting): litellm, the
    scripted provider, and the tokenizer litellm loads at its first completion."""
    from litellm import main

    register_scripted_provider()
    main.encoding  # noqa: B018 (a lazy module attribute: reading it loads it)


def _transient_errors() -> tuple[type[BaseException], ...]:
    """Worth another attempt: the same request may well succeed a moment later."""
    exc = _litellm().exceptions
    return (
        exc.Timeout,
        exc.APIConnectionError,
        exc.RateLimitError,
        exc.ServiceUnavailableError,
        exc.InternalServerError,
    )


def register_scripted_provider() -> None:
    """Add the scripted model to litellm's custom providers, once, keeping any other entry."""
    from agents.scripted import PROVIDER, ScriptedLLM

    litellm = _litellm()
    for item in litellm.custom_provider_map:
        if item.get("provider") == PROVIDER:
            return
    litellm.custom_provider_map.append({"provider": PROVIDER, "custom_handler": ScriptedLLM()})


class LLMError(Exception):
    """An LLM call failed for good: a permanent error, or a transient one on the last attempt.
    `kind` says which, for callers that must tell a timeout from the rest: "timeout",
    "rate_limit", "server", "connection", "script" (the scripted model left its script), "auth",
    "bad_request", "not_found" or "other". `tool_error`: the tool's error that made the scripted
    model leave its script, when one did (the run ends with it)."""

    def __init__(
        self,
        message: str,
        retryable: bool = False,
        attempts: int = 1,
        kind: str = "other",
        tool_error: dict | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.attempts = attempts
        self.kind = kind
        self.tool_error = tool_error


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    # The raw argument string when the model sent something that is not a JSON object.
    arguments_error: str | None = None


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


@dataclass
class LLMReply:
    text: str | None
    tool_calls: list[ToolCall]
    usage: Usage
    model: str
    # The assistant message in OpenAI format, to append to the transcript as is.
    raw_message: dict[str, Any]
    finish_reason: str | None = None
    attempts: int = 1


def tool_spec(name: str, description: str | None, input_schema: Mapping | None) -> dict:
    """A host tool description in OpenAI tool format (what litellm expects for every provider)."""
    parameters = dict(input_schema) if input_schema else {"type": "object", "properties": {}}
    return {
        "type": "function",
        "function": {"name": name, "description": description or "", "parameters": parameters},
    }


def schema_tokens(specs: list[dict]) -> int:
    """Tokens the tool list `specs` adds to a prompt, by litellm's counter over its JSON (its
    default tokenizer: a figure to compare, not a bill). Not litellm's own tool formatting,
    which fails on a valid schema it does not expect (an array without `items`)."""
    if not specs:
        return 0
    return _litellm().token_counter(text=json.dumps(specs, ensure_ascii=False))


def default_model() -> str:
    return getattr(settings, "MCPLET_LLM_MODEL", "") or DEFAULT_MODEL


def _script_error(exc: BaseException) -> ScriptError | None:
    """The ScriptError behind litellm's mapped exception, if the scripted model raised one."""
    from agents.scripted import ScriptError

    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, ScriptError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def is_retryable(exc: BaseException) -> bool:
    if _script_error(exc) is not None:
        return False
    if isinstance(exc, _transient_errors()):
        return True
    # A generic litellm.APIError still says what the server answered.
    status = getattr(exc, "status_code", None)
    return (
        isinstance(exc, _litellm().exceptions.APIError)
        and isinstance(status, int)
        and (status in (408, 429) or status >= 500)
    )


def error_kind(exc: BaseException) -> str:
    if _script_error(exc) is not None:
        return "script"
    _exc = _litellm().exceptions
    # Timeout first: it is also an (openai) APIConnectionError.
    kinds = (
        (_exc.Timeout, "timeout"),
        (_exc.RateLimitError, "rate_limit"),
        ((_exc.ServiceUnavailableError, _exc.InternalServerError), "server"),
        (_exc.APIConnectionError, "connection"),
        ((_exc.AuthenticationError, _exc.PermissionDeniedError), "auth"),
        (_exc.BadRequestError, "bad_request"),
        (_exc.NotFoundError, "not_found"),
    )
    for classes, kind in kinds:
        if isinstance(exc, classes):
            return kind
    status = getattr(exc, "status_code", None)
    if isinstance(exc, _exc.APIError) and isinstance(status, int) and status >= 500:
        return "server"
    return "other"


def _describe(exc: BaseException, model: str) -> str:
    script_error = _script_error(exc)
    if script_error is not None:
        return script_error.message
    text = str(exc)
    # litellm's own messages already start with "litellm.<ErrorClass>:".
    return (
        f"{model}: {text}"
        if text.startswith("litellm.")
        else f"{model}: {type(exc).__name__}: {text}"
    )


def complete(
    messages: list[dict],
    *,
    model: str | None = None,
    tools: list[dict] | None = None,
    timeout: float = 60,
    max_retries: int = 2,
    backoff: float = 1.0,
    agent_id: str = "",
    metadata: Mapping[str, Any] | None = None,
    api_base: str | None = None,
    api_key: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> LLMReply:
    """One assistant turn for `messages` (OpenAI format), with `tools` in OpenAI tool format
    (see `tool_spec`). Transient failures are retried up to `max_retries` times, waiting
    `backoff * 2**n` seconds before retry n+1; anything else fails at once. Raises `LLMError`.
    `metadata` (e.g. a `run_id`) reaches callbacks and the scripted model with `agent_id`."""
    model = model or default_model()
    register_scripted_provider()  # first call, or someone replaced litellm.custom_provider_map
    kwargs: dict[str, Any] = {
        "model": model,
        "messages": list(messages),
        "timeout": timeout,
        "metadata": {**(metadata or {}), "agent_id": agent_id},
        # Ours are the only retries: no litellm wrapper retries, no OpenAI-SDK retries inside.
        "num_retries": 0,
        "max_retries": 0,
    }
    if tools:
        kwargs["tools"] = tools
    if api_base:
        kwargs["api_base"] = api_base
    if api_key:
        kwargs["api_key"] = api_key

    traced = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
    with tracing.span(f"chat {model}", kind="client", attributes=traced) as span:
        try:
            reply = _with_retries(kwargs, model, max_retries, backoff, agent_id, sleep)
        except LLMError as exc:
            span.fail(exc.kind or "error", str(exc))
            raise
        span.set_attributes(
            {
                "gen_ai.response.model": reply.model,
                "gen_ai.usage.input_tokens": reply.usage.prompt_tokens,
                "gen_ai.usage.output_tokens": reply.usage.completion_tokens,
            }
        )
        return reply


def _with_retries(kwargs, model, max_retries, backoff, agent_id, sleep):
    """litellm's completion, tried again after a transient failure (see `complete`)."""
    attempts = max(0, max_retries) + 1
    for attempt in range(1, attempts + 1):
        try:
            response = _litellm().completion(**kwargs)
        except Exception as exc:  # litellm maps provider errors to its exception classes
            retryable = is_retryable(exc)
            message = _describe(exc, model)
            if not retryable or attempt == attempts:
                if retryable:
                    message = f"{message} (gave up after {attempt} attempts)"
                raise LLMError(
                    message,
                    retryable=retryable,
                    attempts=attempt,
                    kind=error_kind(exc),
                    tool_error=getattr(_script_error(exc), "tool_error", None),
                ) from exc
            delay = backoff * 2 ** (attempt - 1)
            logger.warning(
                "LLM call for agent %s failed (attempt %d of %d), retrying in %.1f s: %s",
                agent_id or "-",
                attempt,
                attempts,
                delay,
                message,
            )
            if delay > 0:
                sleep(delay)
            continue
        return parse_response(response, model=model, attempts=attempt)
    raise AssertionError("unreachable")  # the loop returns or raises


def _parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    if isinstance(raw, Mapping):
        return dict(raw), None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None  # some providers send "" for a call without arguments
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return {}, str(raw)
    if not isinstance(value, dict):
        return {}, str(raw)  # tool arguments are a JSON object, nothing else
    return value, None


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def parse_response(response: Any, *, model: str, attempts: int = 1) -> LLMReply:
    """litellm's ModelResponse as an LLMReply."""
    choices = _get(response, "choices") or []
    if not choices:
        raise LLMError(f"{model}: the response has no choices", retryable=False, attempts=attempts)
    choice = choices[0]
    message = _get(choice, "message")
    text = _get(message, "content")
    tool_calls: list[ToolCall] = []
    raw_calls: list[dict[str, Any]] = []
    for call in _get(message, "tool_calls") or []:
        function = _get(call, "function")
        name = _get(function, "name") or ""
        raw_arguments = _get(function, "arguments")
        arguments, error = _parse_arguments(raw_arguments)
        # Every call needs an id to pair it with its tool message; a few providers omit it.
        call_id = _get(call, "id") or f"call_{uuid.uuid4().hex[:24]}"
        tool_calls.append(ToolCall(call_id, name, arguments, error))
        if raw_arguments is None or isinstance(raw_arguments, Mapping):
            raw_arguments = json.dumps(arguments, ensure_ascii=False)
        raw_calls.append(
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": raw_arguments},
            }
        )
    raw_message: dict[str, Any] = {"role": "assistant", "content": text}
    if raw_calls:
        raw_message["tool_calls"] = raw_calls  # left out when empty: some providers reject []

    usage = _get(response, "usage")
    prompt = int(_get(usage, "prompt_tokens", 0) or 0)
    completion = int(_get(usage, "completion_tokens", 0) or 0)
    total = int(_get(usage, "total_tokens", 0) or 0) or prompt + completion
    return LLMReply(
        text=text,
        tool_calls=tool_calls,
        usage=Usage(prompt, completion, total),
        model=_get(response, "model") or model,
        raw_message=raw_message,
        finish_reason=_get(choice, "finish_reason"),
        attempts=attempts,
    )
