"""Reading and writing a run's transcript (the OpenAI-format messages litellm takes): the
tool calls still to answer, the answer to one, a model's JSON answer."""

import json

from mcplet_host import storable


def tool_message(call, envelope):
    """The answer to one tool call, as the tool wrote it: § as §, not \u00a7."""
    return {"role": "tool", "tool_call_id": call["id"], "content": storable.json_text(envelope)}


def unanswered(transcript):
    """The tool calls of the last assistant turn that have no tool message yet, each with its
    place in the transcript (`call-<turn>-<index>`), which names its held call: the ids are the
    LLM's, and one named like another held call ("result", "action-0") must not take its
    approval."""
    for turn in range(len(transcript) - 1, -1, -1):
        if transcript[turn].get("role") == "assistant":
            answered = {m.get("tool_call_id") for m in transcript[turn:] if m.get("role") == "tool"}
            calls = enumerate(transcript[turn].get("tool_calls") or [])
            return [(f"call-{turn}-{i}", c) for i, c in calls if c["id"] not in answered]
    return []


def as_json(text):
    """A model's JSON answer, fenced or not, with what the host cannot store or sign (a NUL, a
    lone surrogate: half an emoji) written out (`storable.printable`). ValueError if it is not
    JSON the host can walk."""
    text = text.strip()
    if text.startswith("```"):  # a fenced answer: keep what is inside
        text = text.strip("`").removeprefix("json").strip()
    try:
        return storable.printable(json.loads(text))
    except RecursionError:
        raise ValueError("it is nested too deeply") from None
