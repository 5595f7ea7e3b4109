"""`storable.json_text`: JSON as a person or a model reads it, and still a row can keep."""

import json

from mcplet_host import storable


def test_json_text_reads_as_written():
    text = storable.json_text({"message": "not granted to partner-bot (§3.4)", "雨": [1]})
    assert text == '{"message": "not granted to partner-bot (§3.4)", "雨": [1]}'


def test_json_text_escapes_only_what_utf8_cannot_encode():
    value = {"message": "§ a\ud800b", "nul": "a\x00b"}
    text = storable.json_text(value)
    assert "\\ud800" in text and "\\u0000" in text
    assert text.encode("utf-8") and json.loads(text) == value
