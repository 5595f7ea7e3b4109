import json
import re

import pytest

from mcplets import Envelope, ErrorCode, MCPletError, error, ok

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def test_ok_envelope_shape():
    envelope = ok({"n": 1}, tool_id="count", mcplet_type="read", visibility=["model"])

    assert set(envelope) == {"result", "_meta"}
    assert envelope["result"] == {"n": 1}
    meta = envelope["_meta"]
    assert TIMESTAMP.match(meta["timestamp"])
    assert meta | {"timestamp": None} == {
        "timestamp": None,
        "toolId": "count",
        "mcpletType": "read",
        "visibility": ["model"],
    }
    assert json.loads(envelope.text) == envelope
    assert not envelope.is_error


def test_ok_text_can_be_a_sentence():
    envelope = ok([], tool_id="t", mcplet_type="read", visibility=["model"], text="Nothing found.")

    result = envelope.to_call_tool_result()

    assert result.content[0].text == "Nothing found."
    assert result.structured_content == dict(envelope)
    assert result.is_error is False


def test_error_envelope_shape():
    envelope = error(
        ErrorCode.RATE_LIMITED,
        "slow down",
        tool_id="t",
        mcplet_type="action",
        retryable=True,
        retry_after_ms=500,
    )

    assert envelope["error"] == {
        "message": "slow down",
        "code": "RATE_LIMITED",
        "retryable": True,
        "retry_after_ms": 500,
    }
    assert "visibility" not in envelope["_meta"]
    assert envelope.text == "RATE_LIMITED: slow down"
    assert envelope.to_call_tool_result().is_error is True


@pytest.mark.parametrize("code", [*ErrorCode, "NOT_FOUND", "X_OUT_OF_DESSERTS"])
def test_defined_and_custom_codes_are_accepted(code):
    envelope = error(code, "m", tool_id="t", mcplet_type="read")

    assert envelope["error"]["code"] == str(code)


@pytest.mark.parametrize("code", ["OOPS", "not_found", "X_", "x_custom"])
def test_other_codes_are_refused(code):
    with pytest.raises(ValueError, match="§9.1"):
        error(code, "m", tool_id="t", mcplet_type="read")
    with pytest.raises(ValueError, match="§9.1"):
        MCPletError(code, "m")


def test_envelope_meta_is_checked():
    with pytest.raises(ValueError, match="§4: mcpletType MUST be one of read, prepare, action"):
        ok(1, tool_id="t", mcplet_type="write", visibility=["model"])
    with pytest.raises(ValueError, match="§8.1"):
        ok(1, tool_id="t", mcplet_type="read", visibility=["llm"])


def test_envelope_is_a_plain_json_dict():
    envelope = ok({"a": (1, 2)}, tool_id="t", mcplet_type="read", visibility=["app"])

    assert isinstance(envelope, Envelope)
    assert isinstance(envelope, dict)
    assert json.loads(json.dumps(envelope))["result"] == {"a": [1, 2]}
