"""The stub model over real HTTP (``python -m gym_runtime.stub_model``), docs/architecture.md §8."""

from __future__ import annotations

import contextlib

import httpx
import pytest

from gym_runtime.stub_model import create_app
from gym_runtime.stub_model.policy import find_arithmetic, tool_arguments
from tests.helpers.gym_servers import start_stub

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    },
}
ARITH = [{"role": "user", "content": "What is 12 + 7 * 3?"}]


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    with start_stub(tmp_path_factory.mktemp("stub"), "--seed", "11", "--max-model-len", "256") as running:
        yield running.url


def chat(url: str, **body) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=30, trust_env=False)


def answers(url: str, n: int, **body) -> list[str]:
    return [chat(url, **body).json()["choices"][0]["message"]["content"] for _ in range(n)]


def test_models_lists_the_served_model(stub):
    card = httpx.get(stub + "/v1/models", trust_env=False).json()["data"][0]
    assert card["id"] == "stub-model" and card["max_model_len"] == 256


def test_samples_of_one_prompt_differ_and_runs_are_reproducible(tmp_path):
    with contextlib.ExitStack() as stack:
        a, b, c = (stack.enter_context(start_stub(tmp_path, "--seed", seed)).url for seed in ("1", "1", "2"))
        first = answers(a, 12, messages=ARITH)
        assert len(set(first)) > 1 and "The answer is 33." in first
        assert answers(b, 12, messages=ARITH) == first
        assert answers(c, 12, messages=ARITH) != first


def test_temperature_zero_is_greedy(stub):
    assert set(answers(stub, 6, messages=ARITH, temperature=0)) == {"The answer is 33."}


def test_request_seed_pins_the_sample(stub):
    assert len(set(answers(stub, 5, messages=ARITH, seed=42))) == 1


def test_echo_block_answers_the_prompts_last_code_block(stub):
    code = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    prompt = (
        f"Sum two numbers. Use ```python for the code block.\n```text\n1 2\n```\n[stub:echo_block]\n{code}\n"
        "Answer in one ```python block."
    )
    assert set(answers(stub, 3, messages=[{"role": "user", "content": prompt}])) == {code}
    plain = prompt.replace("[stub:echo_block]", "")  # without the directive: the usual policy
    assert set(answers(stub, 3, messages=[{"role": "user", "content": plain}])) == {"I don't know."}


def test_directives_set_p_and_no_arithmetic_means_no_spread(stub):
    sure = [{"role": "system", "content": "[stub:p=1]"}, *ARITH]
    assert set(answers(stub, 6, messages=sure)) == {"The answer is 33."}
    assert set(answers(stub, 6, messages=[{"role": "user", "content": "Hello"}])) == {"I don't know."}


def test_tool_call_when_tools_are_offered_then_text(stub):
    messages = [{"role": "user", "content": "Weather in 'Paris' for 3 days?"}]
    choice = chat(stub, messages=messages, tools=[TOOL]).json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'}
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
    ]
    texts = answers(stub, 8, messages=messages, tools=[TOOL])
    assert set(texts) == {"The tool returned: sunny", "I could not find the answer."}
    assert (
        chat(stub, messages=messages[:1], tools=[TOOL], tool_choice="none").json()["choices"][0]["finish_reason"]
        == "stop"
    )


def test_vllm_token_fields_agree_with_tokenize(stub):
    body = chat(
        stub, messages=ARITH, logprobs=True, top_logprobs=0, return_tokens_as_token_ids=True, return_token_ids=True
    ).json()
    choice = body["choices"][0]
    ids = [int(e["token"].removeprefix("token_id:")) for e in choice["logprobs"]["content"]]
    assert ids == choice["token_ids"] and all(e["logprob"] <= 0 for e in choice["logprobs"]["content"])
    tokenized = httpx.post(stub + "/tokenize", json={"model": "stub-model", "messages": ARITH}, trust_env=False).json()
    assert tokenized["tokens"] == body["prompt_token_ids"] and tokenized["count"] == body["usage"]["prompt_tokens"]
    assert body["usage"]["completion_tokens"] == len(ids)
    plain = chat(stub, messages=ARITH, logprobs=True).json()["choices"][0]["logprobs"]["content"]
    assert not plain[0]["token"].startswith("token_id:")


def test_context_length_and_max_tokens(stub):
    too_long = chat(stub, messages=[{"role": "user", "content": "x " * 300}])
    assert too_long.status_code == 400 and "maximum context length" in too_long.json()["error"]["message"]
    over = chat(stub, messages=ARITH, max_tokens=300)
    assert over.status_code == 400 and "max_tokens=300 cannot be greater than max_model_len=256" in over.text
    cut = chat(stub, messages=ARITH, max_tokens=2).json()["choices"][0]
    assert cut["finish_reason"] == "length" and cut["message"]["content"] == "The "


def test_errors_unknown_model_and_requested_status(stub):
    assert chat(stub, messages=ARITH, model="other").status_code == 404
    assert chat(stub, messages=[{"role": "user", "content": "[stub:error=503]"}]).status_code == 503
    assert chat(stub, messages=[]).status_code == 400


def test_api_key_is_enforced_when_set(tmp_path):
    with start_stub(tmp_path, "--api-key", "sekret") as running:
        assert chat(running.url, messages=ARITH).status_code == 401
        ok = httpx.post(
            running.url + "/v1/chat/completions",
            json={"messages": ARITH},
            trust_env=False,
            headers={"Authorization": "Bearer sekret"},
        )
        assert ok.status_code == 200


def test_create_app_and_policy_helpers():
    assert create_app(seed=3, model="m").state.settings.model == "m"
    assert find_arithmetic("Compute (2 + 3) × 4 please") == 20
    assert find_arithmetic("No maths, just 42.") is None
    assert tool_arguments(TOOL, 'city "Oslo" in 5 days') == {"city": "Oslo", "days": 5}
