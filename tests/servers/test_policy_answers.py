"""The built-in servers' reading of policy answers, as pure functions (``servers/_kit/markup.py``,
``servers/_kit/policy_answers.py``; docs/rollouts.md): tool-call markup left in a final answer,
interrupted completions, and the refusals that name a flag or a setting."""

from __future__ import annotations

import sys

import pytest

from tests.helpers.gym_servers import SERVERS

sys.path.insert(0, str(SERVERS))

from _kit.markup import unparsed_tool_calls  # noqa: E402
from _kit.policy_answers import TokenIdsError, explain, interrupted, prompt_ids  # noqa: E402

OFFERED = ["get_code"]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('<tool_call>\n{"name": "get_code", "arguments": {"key": "a"}}\n</tool_call>', 1),
        ('<|tool_call|>[{"name": "get_code", "arguments": {}}]', 1),
        ('[TOOL_CALLS][{"name": "get_code", "arguments": {"key": "a"}}]', 1),
        ('Sure. {"name": "get_code", "arguments": {"key": "a"}} and {"name": "get_code", "parameters": {}}', 2),
        ('{"name": "get_code", "arguments": {"key": "a"', 0),  # cut JSON: not a call
        ('{"name": "other_tool", "arguments": {}}', 0),  # not offered
        ('{"name": "get_code"}', 0),  # no arguments: a mention, not a call
        ("The code is CODE-1A2B3C.", 0),
    ],
)
def test_tool_call_markup_in_a_final_answer(text: str, found: int) -> None:
    assert unparsed_tool_calls(text, OFFERED) == found


def test_no_markup_is_counted_for_a_row_without_tools() -> None:
    assert unparsed_tool_calls('<tool_call>{"name": "get_code", "arguments": {}}</tool_call>', []) == 0


def test_a_long_answer_full_of_braces_is_read_in_bounded_time() -> None:
    assert unparsed_tool_calls('{"name": "get_code", ' * 50_000, OFFERED) == 0


@pytest.mark.parametrize(
    ("reason", "cut"),
    [
        ("stop", None),
        ("length", None),
        ("tool_calls", None),
        (None, None),
        ("content_filter", None),
        ("abort", "abort"),
        ("error", "error"),
    ],
)
def test_abort_and_unknown_finish_reasons_are_interruptions(reason: str | None, cut: str | None) -> None:
    assert interrupted({"choices": [{"finish_reason": reason, "message": {}}]}) == cut


def test_refusals_that_name_a_flag_or_a_setting() -> None:
    with_tools = {"tools": [{"type": "function"}], "messages": []}
    kind, advice = explain(
        400,
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
        with_tools,
        "policy_model",
        "both",
        "acme",
    )
    assert kind == "tool_parser_missing" and "--enable-auto-tool-choice --tool-call-parser <parser for acme>" in advice
    assert explain(400, "auto tool choice ...", {"messages": []}, "policy_model", "both", "acme") is None
    carried = {"messages": [{"role": "assistant", "content": "", "reasoning": "r", "reasoning_content": "r"}]}
    kind, advice = explain(400, "messages[2]: duplicate field `reasoning`", carried, "policy_model", "both", "acme")
    assert kind == "reasoning_field_rejected"
    assert "set reasoning_field: reasoning or reasoning_content in the config of 'policy_model'" in advice
    assert explain(400, "duplicate field `reasoning`", {"messages": []}, "policy_model", "both", "acme") is None
    assert explain(500, "duplicate field `reasoning`", carried, "policy_model", "both", "acme") is None


def test_prompt_ids_must_be_token_ids() -> None:
    assert prompt_ids([1, 2, 3], "x") == [1, 2, 3]
    for bad in (None, "1 2", [1, "2"], [True], [-1]):
        with pytest.raises(TokenIdsError, match="the /tokenize answer"):
            prompt_ids(bad, "the /tokenize answer")


def test_an_answer_of_many_long_call_starts_is_read_in_bounded_time() -> None:
    start = '{"name": "get_code", "arguments": [' + "1, " * 5_000
    assert unparsed_tool_calls(start * 40, OFFERED) == 0
