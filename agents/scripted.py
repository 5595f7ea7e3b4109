"""The scripted model: an offline LLM that replays a script, registered with litellm as the
custom provider `scripted` (see `agents.llm`), so it takes the same request/response path as any
other model. Used by the embedded default, the demo and the tests.

Model string `scripted/<name>` plays `<name>.yaml` (or `.yml`, `.json`) from the first directory
of `settings.MCPLET_SCRIPT_DIRS` that has it (default: `agents/scripts`). The agent is the
`agent_id` in litellm's `metadata`, which reaches the handler as `litellm_params["metadata"]`.

    agents:
      info-gathering-agent:
        - tool_calls:
            - {name: fetch_web_content, arguments: {url: "http://example.test/weather"}}
        - expect: {tool_results_contain: ["rain"]}
          text: "Rain tomorrow."
      planning-agent:
        - json: {plan: {steps: []}}

The turn played is the number of assistant messages already in the conversation, so replaying is
deterministic and a resumed run continues where it stopped. A turn answers with `tool_calls`
(optionally with `text` alongside), `text`, or `json` (dumped into the text); a tool call's
string arguments may name `${NAME}` from `settings.MCPLET_SCRIPT_VARIABLES`. Optional keys:
`expect` (checks on the conversation before answering: `tool_results_contain`, `tool_errors`,
`user_contains`, `tools_offered`: the exact names of the tools this turn was given), `delay`
(seconds to sleep first; longer than the call's timeout raises a timeout) and
`error: {kind: timeout|rate_limit|server|unavailable|connection, times: N}` (the first N
attempts at this turn fail with that transient error; the turn is not consumed). A tool call
may carry its own `id`, as models choose theirs.

Whenever the conversation leaves its script — no script, unknown agent, more turns than scripted,
an unmet `expect`, a malformed script — the model raises `ScriptError`, which litellm surfaces as
a BadRequestError (never retried) and `agents.llm.complete` as `LLMError(retryable=False)`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# As in agents.llm, whichever of the two is imported first: litellm must not fetch its model
# cost map from the internet at import.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402
import yaml  # noqa: E402
from django.conf import settings  # noqa: E402
from litellm import CustomLLM  # noqa: E402
from litellm.llms.custom_llm import CustomLLMError  # noqa: E402

PROVIDER = "scripted"
SCRIPT_SUFFIXES = (".yaml", ".yml", ".json")
# A script is named, never addressed by path: the model string may come from configuration
# that an operator edits, and must not be able to read arbitrary files.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

_TURN_KEYS = {"tool_calls", "text", "json", "expect", "delay", "error"}
_EXPECT_KEYS = {"tool_results_contain", "tool_errors", "user_contains", "tools_offered"}
_CALL_KEYS = {"name", "arguments", "id"}
_VARIABLE_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ERROR_KINDS = {
    "timeout": litellm.exceptions.Timeout,
    "rate_limit": litellm.exceptions.RateLimitError,
    "server": litellm.exceptions.InternalServerError,
    "unavailable": litellm.exceptions.ServiceUnavailableError,
    "connection": litellm.exceptions.APIConnectionError,
}


class ScriptError(CustomLLMError):
    """The conversation left its script. Status 400 makes litellm map it to BadRequestError, a
    permanent error: replaying the same conversation would fail the same way. `tool_error`: the
    tool's error (code and message) that broke an expectation, when one did."""

    def __init__(self, message: str, tool_error: dict | None = None):
        super().__init__(status_code=400, message=message)
        self.tool_error = tool_error


# Failed attempts per (script file, run, agent, turn): an `error` turn fails its first `times`
# attempts in this process, then answers. Kept outside the conversation so a failure consumes
# no turn.
_attempts: dict[tuple[str, str, str, int], int] = {}
_attempts_lock = threading.Lock()


def reset_attempts() -> None:
    """Forget the failed attempts counted for `error` turns (tests, repeated demo runs)."""
    with _attempts_lock:
        _attempts.clear()


def script_dirs() -> list[Path]:
    dirs = getattr(settings, "MCPLET_SCRIPT_DIRS", None)
    if not dirs:
        dirs = [Path(settings.BASE_DIR) / "agents" / "scripts"]
    return [Path(d) for d in dirs]


def find_script(name: str) -> Path:
    if not _NAME_RE.match(name) or ".." in name:
        raise ScriptError(f"scripted model {name!r}: not a script name (letters, digits, _ . -)")
    dirs = script_dirs()
    for directory in dirs:
        for suffix in SCRIPT_SUFFIXES:
            path = directory / f"{name}{suffix}"
            if path.is_file():
                return path
    searched = ", ".join(str(d) for d in dirs)
    raise ScriptError(
        f"scripted model {name!r}: no script {name}.yaml/.yml/.json in MCPLET_SCRIPT_DIRS "
        f"({searched})"
    )


@functools.lru_cache(maxsize=64)
def _parse(path: Path, mtime_ns: int, size: int) -> Any:
    text = path.read_text(encoding="utf-8")
    return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)


def load_script(name: str) -> tuple[Path, dict[str, list[dict]]]:
    """The script's agents (read-only), parsed again whenever the file changes, so edits apply
    at once; parsing it on every call was most of a scripted turn's time (bench/scenario.py)."""
    path = find_script(name)
    try:
        stat = path.stat()
        data = _parse(path, stat.st_mtime_ns, stat.st_size)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ScriptError(f"scripted model {name!r}: cannot read {path}: {exc}") from exc
    agents = data.get("agents") if isinstance(data, Mapping) else None
    if not isinstance(agents, Mapping):
        raise ScriptError(f"scripted model {name!r}: {path} has no `agents:` mapping")
    for agent, turns in agents.items():
        if not isinstance(turns, list) or not all(isinstance(t, Mapping) for t in turns):
            raise ScriptError(
                f"scripted model {name!r}: agent {agent} in {path} must be a list of turns"
            )
    return path, dict(agents)


# --- reading the conversation ---------------------------------------------------------------


def _field(message: Any, key: str) -> Any:
    if isinstance(message, Mapping):
        return message.get(key)
    return getattr(message, key, None)


def _text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(part) for part in content)
    if isinstance(content, Mapping):
        return str(content.get("text", ""))
    return str(content)


def _last_tool_results(messages: list) -> list[str]:
    """The tool messages since the last assistant turn: the results the model is answering."""
    results: list[str] = []
    for message in reversed(messages):
        role = _field(message, "role")
        if role == "assistant":
            break
        if role == "tool":
            results.append(_text(_field(message, "content")))
    results.reverse()
    return results


def _is_error_envelope(text: str) -> bool:
    try:
        body = json.loads(text)
    except ValueError:
        return False
    return isinstance(body, Mapping) and "error" in body


def _first_error(results: list[str]) -> dict | None:
    """The first error among the tool results, as {message, code}: what a script that expected
    an answer got instead (a refusal it did not plan for)."""
    for text in filter(_is_error_envelope, results):
        error = json.loads(text)["error"]
        if isinstance(error, Mapping) and isinstance(error.get("message"), str):
            return {"message": error["message"], "code": str(error.get("code") or "UNKNOWN_ERROR")}
    return None


def _as_strings(value: Any, what: str, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise ScriptError(f"{where}: expect.{what} must be a string or a list of strings")


def check_expect(expect: Any, messages: list, where: str, tools: list | None = None) -> None:
    if not isinstance(expect, Mapping):
        raise ScriptError(f"{where}: `expect` must be a mapping")
    unknown = set(expect) - _EXPECT_KEYS
    if unknown:
        raise ScriptError(f"{where}: unknown expect keys {sorted(unknown)}")
    results = _last_tool_results(messages)
    joined = "\n".join(results)
    refused = _first_error(results)
    if "tool_results_contain" in expect:
        for needle in _as_strings(expect["tool_results_contain"], "tool_results_contain", where):
            if needle not in joined:
                raise ScriptError(
                    f"{where}: expected the tool results to contain {needle!r}, got "
                    f"{_preview(joined)} (the conversation left its script)",
                    tool_error=refused,
                )
    if "tool_errors" in expect:
        wanted = bool(expect["tool_errors"])
        got = any(_is_error_envelope(r) for r in results)
        if got != wanted:
            state = "an error" if got else "no error"
            raise ScriptError(
                f"{where}: expected tool_errors={str(wanted).lower()}, but the last tool results "
                f"hold {state}: {_preview(joined)} (the conversation left its script)",
                tool_error=refused,
            )
    if "tools_offered" in expect:
        offered = sorted(_field(_field(t, "function") or {}, "name") for t in tools or [])
        wanted = sorted(_as_strings(expect["tools_offered"], "tools_offered", where))
        if offered != wanted:
            raise ScriptError(
                f"{where}: expected the tools offered to be {wanted}, got {offered} "
                "(the conversation left its script)"
            )
    if "user_contains" in expect:
        users = "\n".join(
            _text(_field(m, "content")) for m in messages if _field(m, "role") == "user"
        )
        for needle in _as_strings(expect["user_contains"], "user_contains", where):
            if needle not in users:
                raise ScriptError(
                    f"{where}: expected the user messages to contain {needle!r}, got "
                    f"{_preview(users)} (the conversation left its script)"
                )


def _preview(text: str, limit: int = 200) -> str:
    text = text if len(text) <= limit else text[:limit] + "…"
    return repr(text) if text else "nothing"


# --- answering --------------------------------------------------------------------------------


def _tool_calls(calls: Any, agent: str, turn: int, where: str) -> list[dict]:
    if not isinstance(calls, list) or not calls:
        raise ScriptError(f"{where}: `tool_calls` must be a non-empty list")
    out = []
    for i, call in enumerate(calls, start=1):
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
            raise ScriptError(f"{where}: tool call {i} needs a `name`")
        unknown = set(call) - _CALL_KEYS
        if unknown:
            raise ScriptError(f"{where}: tool call {i} has unknown keys {sorted(unknown)}")
        arguments = _expand(call.get("arguments", {}), f"{where}: tool call {i}")
        # A string is sent as is, so a script can play a model that emits broken JSON.
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        out.append(
            {
                # A script may pick the id, as a model does (they are the model's, not ours).
                "id": call.get("id", f"call_{agent}_{turn}_{i}"),
                "type": "function",
                "function": {"name": call["name"], "arguments": arguments},
            }
        )
    return out


def _expand(value: Any, where: str) -> Any:
    """`${NAME}` in the arguments' strings replaced by settings.MCPLET_SCRIPT_VARIABLES[NAME]."""
    if isinstance(value, str):
        known = getattr(settings, "MCPLET_SCRIPT_VARIABLES", {})

        def value_of(match: re.Match) -> str:
            if match[1] not in known:
                raise ScriptError(f"{where}: ${{{match[1]}}} is not in MCPLET_SCRIPT_VARIABLES")
            return str(known[match[1]])

        return _VARIABLE_RE.sub(value_of, value)
    if isinstance(value, list):
        return [_expand(item, where) for item in value]
    if isinstance(value, Mapping):
        return {key: _expand(item, where) for key, item in value.items()}
    return value


def _timeout_seconds(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, int | float):
        return float(timeout)
    # httpx.Timeout: the read timeout is the one a slow answer runs into.
    read = getattr(timeout, "read", None)
    return float(read) if read is not None else None


def _tokens(text: str) -> int:
    return len(text) // 4  # a deterministic estimate; the script has no tokenizer


def _prompt_text(messages: list) -> str:
    parts = []
    for m in messages:
        parts.append(_text(_field(m, "content")))
        for call in _field(m, "tool_calls") or []:
            function = _field(call, "function")
            parts.append(f"{_field(function, 'name')}{_field(function, 'arguments')}")
    return "".join(parts)


class ScriptedLLM(CustomLLM):
    """litellm custom handler replaying scripts; see the module docstring."""

    def completion(
        self,
        model: str,
        messages: list,
        *args: Any,
        litellm_params: dict | None = None,
        timeout: Any = None,
        **kwargs: Any,
    ) -> litellm.ModelResponse:
        # litellm hands over the model without its provider prefix.
        name = model.split("/", 1)[1] if model.startswith(f"{PROVIDER}/") else model
        metadata = (litellm_params or {}).get("metadata") or {}
        agent = metadata.get("agent_id") or ""
        if not agent:
            raise ScriptError(
                f"scripted model {name!r}: no agent_id in the call's metadata, so no script part "
                "to play"
            )
        path, agents = load_script(name)
        if agent not in agents:
            raise ScriptError(
                f"scripted model {name!r}: agent {agent} is not in {path.name} (it scripts "
                f"{', '.join(sorted(agents)) or 'no agent'})"
            )
        turns = agents[agent]
        index = sum(1 for m in messages if _field(m, "role") == "assistant")
        turn = index + 1
        if index >= len(turns):
            raise ScriptError(
                f"scripted model {name!r}: agent {agent} has no turn {turn} (its script has "
                f"{len(turns)}; the conversation left its script)"
            )
        step = turns[index]
        where = f"scripted model {name!r}: agent {agent} turn {turn}"
        unknown = set(step) - _TURN_KEYS
        if unknown:
            raise ScriptError(f"{where}: unknown keys {sorted(unknown)}")

        if "expect" in step:
            tools = (kwargs.get("optional_params") or {}).get("tools")
            check_expect(step["expect"], messages, where, tools)
        self._maybe_fail(step, path, metadata, agent, turn, name, where)
        self._delay(step, timeout, name, where)

        if "json" in step:
            if "text" in step or "tool_calls" in step:
                raise ScriptError(f"{where}: `json` answers alone (no `text`, no `tool_calls`)")
            content: str | None = json.dumps(step["json"], ensure_ascii=False)
        elif "text" in step:
            if not isinstance(step["text"], str):
                raise ScriptError(f"{where}: `text` must be a string")
            content = step["text"]
        else:
            content = None
        tool_calls = (
            _tool_calls(step["tool_calls"], agent, turn, where) if "tool_calls" in step else []
        )
        if content is None and not tool_calls:
            raise ScriptError(f"{where}: a turn needs `tool_calls`, `text` or `json`")

        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_calls:
            message["tool_calls"] = tool_calls
        completion_text = (content or "") + "".join(
            c["function"]["name"] + c["function"]["arguments"] for c in tool_calls
        )
        prompt_tokens = _tokens(_prompt_text(messages))
        completion_tokens = _tokens(completion_text)
        return litellm.ModelResponse(
            id=f"scripted-{name}-{agent}-{turn}",
            model=f"{PROVIDER}/{name}",
            choices=[
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if tool_calls else "stop",
                }
            ],
            usage={
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        )

    async def acompletion(self, *args: Any, **kwargs: Any) -> litellm.ModelResponse:
        # In a thread: a `delay` must not block the event loop.
        return await asyncio.to_thread(self.completion, *args, **kwargs)

    @staticmethod
    def _maybe_fail(step, path, metadata, agent, turn, name, where) -> None:
        error = step.get("error")
        if error is None:
            return
        if not isinstance(error, Mapping) or error.get("kind") not in _ERROR_KINDS:
            raise ScriptError(f"{where}: `error` needs a kind in {sorted(_ERROR_KINDS)}")
        times = error.get("times", 1)
        if not isinstance(times, int) or times < 0:
            raise ScriptError(f"{where}: error.times must be a whole number")
        # Per run when the caller names one, so the demo fails afresh on every run.
        key = (str(path), str(metadata.get("run_id", "")), agent, turn)
        with _attempts_lock:
            failed = _attempts.get(key, 0)
            if failed >= times:
                return
            _attempts[key] = failed + 1
        exc_class = _ERROR_KINDS[error["kind"]]
        raise exc_class(
            message=f"{where}: scripted {error['kind']} error ({failed + 1} of {times})",
            model=f"{PROVIDER}/{name}",
            llm_provider=PROVIDER,
        )

    @staticmethod
    def _delay(step, timeout, name, where) -> None:
        delay = step.get("delay")
        if delay is None:
            return
        if not isinstance(delay, int | float) or delay < 0:
            raise ScriptError(f"{where}: `delay` must be a number of seconds")
        limit = _timeout_seconds(timeout)
        if limit is not None and delay > limit:
            # Like a real model that is too slow: the call times out after `timeout`.
            time.sleep(limit)
            raise litellm.exceptions.Timeout(
                message=f"{where}: no answer within {limit:g} s (scripted delay {delay:g} s)",
                model=f"{PROVIDER}/{name}",
                llm_provider=PROVIDER,
            )
        time.sleep(delay)
