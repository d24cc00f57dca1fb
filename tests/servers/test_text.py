"""Model output made into text (``servers/_kit/text.py``): what no strict encoder takes becomes
U+FFFD, counted; everything else stays as it was."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "servers"))

from _kit.text import repaired, repaired_str  # noqa: E402


@pytest.mark.parametrize(
    ("text", "fixed", "count"),
    [
        ("The answer is 42. \ud83d", "The answer is 42. \ufffd", 1),  # a split "\ud83d\ude00" escape
        ("\ude00 low first", "\ufffd low first", 1),
        ("nul\x00bel\x07esc\x1b[0m", "nul\ufffdbel\ufffdesc\ufffd[0m", 3),
        ("tab\tnewline\ncr\r ok", "tab\tnewline\ncr\r ok", 0),
        ("\U0001f600 emoji, \u2028, \x7f, \x85 stay", "\U0001f600 emoji, \u2028, \x7f, \x85 stay", 0),
    ],
)
def test_strings(text: str, fixed: str, count: int) -> None:
    assert repaired_str(text) == (fixed, count)
    json.dumps(fixed, ensure_ascii=False).encode("utf-8")  # the strict encoder that raised before


def test_a_json_value_keys_included_and_in_place() -> None:
    value = {
        "output": [{"type": "function_call", "name": "get\ud83d", "arguments": '{"k": "\\ud83d"}'}],
        "reasoning\x00": "x",
        "n": 1,
        "ok": None,
        "nested": [[["\ud800\x00"]]],
    }
    out, count = repaired(value)
    assert out is value and count == 4
    assert out == {
        "output": [{"type": "function_call", "name": "get\ufffd", "arguments": '{"k": "\\ud83d"}'}],
        "reasoning\ufffd": "x",
        "n": 1,
        "ok": None,
        "nested": [[["\ufffd\ufffd"]]],
    }


def test_nesting_as_deep_as_a_parser_allows_is_no_recursion_error() -> None:
    deep = json.loads("[" * 900 + '"\\ud83d"' + "]" * 900)
    out, count = repaired(deep)
    assert count == 1
    while isinstance(out, list):
        out = out[0]
    assert out == "\ufffd"
