"""Where the stub model answered otherwise than vLLM 0.32's OpenAI server, vLLM is right: each
difference found against the real engine (``tests/vllm/``, docs/rollouts.md "A real vLLM engine")
is held here against the stub over real HTTP.
"""

from __future__ import annotations

import httpx
import pytest

from tests.helpers.gym_servers import start_stub

TOOL = {
    "type": "function",
    "function": {
        "name": "get_code",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    },
}
ARITH = [{"role": "user", "content": "What is 12 + 7 * 3?"}]
IM_END = 2  # the stub's end-of-turn token id


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    with start_stub(tmp_path_factory.mktemp("stub"), "--seed", "3", "--max-model-len", "256", "--reasoning") as running:
        yield running.url


def chat(url: str, **body) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=30, trust_env=False)


def tokens(url: str, messages: list[dict], **extra) -> list[int]:
    return httpx.post(url + "/tokenize", json={"messages": messages, **extra}, timeout=30, trust_env=False).json()[
        "tokens"
    ]


def test_reasoning_comes_in_the_reasoning_field_only(stub):
    """vLLM 0.32 with ``--reasoning-parser``: ``message.reasoning``, no ``reasoning_content`` key."""
    message = chat(stub, messages=ARITH).json()["choices"][0]["message"]
    assert message["reasoning"] == "Let me compute the expression." and "reasoning_content" not in message
    old = chat(stub, messages=[{"role": "user", "content": "What is 1 + 1? [stub:reasoning=reasoning_content]"}])
    assert "reasoning" not in old.json()["choices"][0]["message"]  # the directive still gives the old field


def test_no_tool_calls_key_without_a_call(stub):
    message = chat(stub, messages=ARITH).json()["choices"][0]["message"]
    assert "tool_calls" not in message


def test_generated_ids_end_with_the_end_of_turn_token(stub):
    """vLLM's logprob tokens (and ``token_ids``, ``completion_tokens``) include the EOS the model
    emitted, so a prompt + generation is a prefix of the next turn's prompt."""
    body = chat(
        stub, messages=ARITH, temperature=0, logprobs=True, return_tokens_as_token_ids=True, return_token_ids=True
    ).json()
    choice = body["choices"][0]
    ids = [int(e["token"].removeprefix("token_id:")) for e in choice["logprobs"]["content"]]
    assert ids[-1] == IM_END and choice["token_ids"] == ids and body["usage"]["completion_tokens"] == len(ids)
    cut = chat(stub, messages=ARITH, max_tokens=2, return_token_ids=True).json()["choices"][0]
    assert cut["finish_reason"] == "length" and IM_END not in cut["token_ids"]


def test_a_cut_inside_the_reasoning_keeps_it_and_has_no_content(stub):
    """vLLM: ``max_tokens`` reached while thinking -> ``reasoning`` is the partial text, ``content`` null."""
    message = chat(stub, messages=ARITH, max_tokens=4).json()["choices"][0]["message"]
    assert message["content"] is None and message["reasoning"] and "</think>" not in message["reasoning"]


def test_a_prompt_that_fits_with_too_large_max_tokens_is_cut_not_refused(stub):
    """vLLM 0.32 serves prompt + max_tokens over the context and stops at it (``length``); it refuses
    only a prompt longer than the context, one exactly as long, and max_tokens above the context."""
    fits = chat(stub, messages=ARITH, max_tokens=250)
    assert fits.status_code == 200 and fits.json()["usage"]["total_tokens"] <= 256
    over = chat(stub, messages=ARITH, max_tokens=257).json()["error"]
    assert (
        over["message"].startswith("max_tokens=257 cannot be greater than max_model_len=256")
        and over["param"] == "max_tokens"
    )
    long = chat(stub, messages=[{"role": "user", "content": "x " * 300}]).json()["error"]
    assert "your prompt contains at least 257 input tokens" in long["message"] and long["param"] == "input_tokens"


def test_tool_choice_none_keeps_the_tools_in_the_prompt(stub):
    """vLLM renders the tools whatever the tool choice; ``none`` only means no call is parsed."""
    messages = [{"role": "user", "content": "Code for 'alpha'?"}]
    none = chat(stub, messages=messages, tools=[TOOL], tool_choice="none").json()
    assert none["choices"][0]["finish_reason"] == "stop"
    assert none["usage"]["prompt_tokens"] == len(tokens(stub, messages, tools=[TOOL]))


def test_usage_counts_reasoning_tokens(stub):
    usage = chat(stub, messages=ARITH).json()["usage"]
    assert usage["completion_tokens_details"]["reasoning_tokens"] > 0


def test_error_wordings(stub):
    assert "Valid aliases: stub-model." in chat(stub, messages=ARITH, model="other").json()["error"]["message"]
    assert chat(stub, messages=[]).json()["error"]["message"].startswith("Cannot apply chat template to an empty")
