"""Contract tests of servers/responses_api_models/vllm_model over real HTTP (docs/architecture.md §8)."""

from __future__ import annotations

import contextlib

import httpx

from tests.helpers.gym_servers import GymConfig, start_server, start_stub
from tests.servers.conftest import TOOLS


def post(url: str, body: dict, client: httpx.Client | None = None) -> httpx.Response:
    if client is not None:
        return client.post(url, json=body, timeout=30)
    return httpx.post(url, json=body, timeout=30, trust_env=False)


def test_liveness(chain):
    assert httpx.get(chain["policy_model"] + "/", trust_env=False).json() == {"status": "ok"}


def test_responses_text_answer_carries_token_ids_and_usage(chain):
    reply = post(chain["policy_model"] + "/v1/responses", {"input": "What is 6 * 7?"})
    assert reply.status_code == 200
    body = reply.json()
    assert body["object"] == "response" and body["status"] == "completed" and body["incomplete_details"] is None
    message = body["output"][-1]
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["content"][0]["type"] == "output_text" and "The answer is" in message["content"][0]["text"]
    assert len(message["generation_token_ids"]) == len(message["generation_log_probs"]) > 0
    assert message["prompt_token_ids"][0] == 1
    assert body["usage"]["input_tokens"] == len(message["prompt_token_ids"])
    assert body["usage"]["output_tokens"] == len(message["generation_token_ids"])


def test_prompt_token_ids_equal_the_upstream_tokenizer(chain):
    body = post(chain["policy_model"] + "/v1/responses", {"input": "What is 1 + 1?"}).json()
    tokenized = post(
        chain.stubs[0].url + "/tokenize", {"messages": [{"role": "user", "content": "What is 1 + 1?"}]}
    ).json()
    assert body["output"][-1]["prompt_token_ids"] == tokenized["tokens"]


def test_tools_give_a_function_call_item(chain):
    body = post(
        chain["policy_plain"] + "/v1/responses",
        {"input": [{"role": "user", "content": "Code for 'beta'?"}], "tools": TOOLS},
    ).json()
    call = body["output"][-1]
    assert call["type"] == "function_call" and call["name"] == "get_code"
    assert call["arguments"] == '{"key": "beta"}' and call["call_id"] == call["id"]
    assert "prompt_token_ids" not in call
    assert body["tools"] == TOOLS


def test_function_call_output_round_trip(chain):
    history = [
        {"role": "user", "content": "Code for 'beta'?"},
        {"type": "function_call", "call_id": "c1", "name": "get_code", "arguments": '{"key": "beta"}'},
        {"type": "function_call_output", "call_id": "c1", "output": '{"code": "CODE-1"}'},
    ]
    body = post(
        chain["policy_plain"] + "/v1/responses",
        {"input": history, "tools": TOOLS, "temperature": 0, "instructions": "Be brief. [stub:p=1]"},
    ).json()
    assert body["output"][-1]["content"][0]["text"] == 'The tool returned: {"code": "CODE-1"}'
    assert body["instructions"] == "Be brief. [stub:p=1]"


def test_chat_completions_pass_through_moves_tokens_onto_the_message(chain):
    body = post(
        chain["policy_model"] + "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "What is 2 + 2?"}], "model": "anything"},
    ).json()
    choice = body["choices"][0]
    assert body["model"] == "stub-model"
    assert choice["message"]["generation_token_ids"] and choice["message"]["prompt_token_ids"]
    assert "logprobs" not in choice and "prompt_token_ids" not in body


def test_context_length_becomes_an_empty_incomplete_response(chain):
    long_prompt = "word " * 3000
    body = post(chain["policy_model"] + "/v1/responses", {"input": long_prompt}).json()
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["type"] == "message" and body["output"][0]["content"][0]["text"] == ""
    chat = post(
        chain["policy_model"] + "/v1/chat/completions", {"messages": [{"role": "user", "content": long_prompt}]}
    )
    assert chat.json()["choices"][0]["finish_reason"] == "length"


def test_max_output_tokens_cut_is_incomplete(chain):
    body = post(chain["policy_plain"] + "/v1/responses", {"input": "What is 3 + 4?", "max_output_tokens": 2}).json()
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_session_sticks_to_one_replica(chain):
    def served() -> list[int]:
        return [httpx.get(s.url + "/stub/stats", trust_env=False).json()["chat_completions"] for s in chain.stubs]

    with httpx.Client(trust_env=False) as session:
        before = served()
        for _ in range(6):
            assert post(chain["policy_model"] + "/v1/responses", {"input": "hi"}, session).status_code == 200
        delta = [a - b for a, b in zip(served(), before, strict=True)]
    assert sorted(delta) == [0, 6]
    before = served()
    for _ in range(24):
        post(chain["policy_model"] + "/v1/responses", {"input": "hi"})
    assert all(a > b for a, b in zip(served(), before, strict=True))


def test_unreachable_upstream_is_a_502_naming_it(chain):
    """An endpoint nobody listens on is retried until the instance's ``retry_deadline_seconds`` (1 s
    here), then ``model_unavailable`` naming it and the deadline (docs/reliability.md)."""
    reply = post(chain["policy_down"] + "/v1/responses", {"input": "hi"})
    assert reply.status_code == 502
    error = reply.json()["error"]
    down_url = chain.config.instances["policy_down"]["responses_api_models"]["vllm_model"]["base_url"]
    assert error["type"] == "model_unavailable" and down_url in error["message"]
    assert "gave up at its retry deadline of 1s" in error["message"]


def test_upstream_error_status_is_a_502_naming_it(chain):
    """A status that a restarting vLLM never answers (500) is not retried: 502 at once."""
    reply = post(chain["policy_plain"] + "/v1/responses", {"input": "fail please [stub:error=500]"})
    assert reply.status_code == 502
    error = reply.json()["error"]
    assert error["upstream_status"] == 500 and chain.stubs[0].url in error["url"]
    assert "stub error" in str(error["upstream_body"])


def test_request_without_input_is_422(chain):
    assert post(chain["policy_model"] + "/v1/responses", {"model": "x"}).status_code == 422


def test_reasoning_content_becomes_a_reasoning_item_or_a_clear_error(tmp_path):
    with start_stub(tmp_path, "--reasoning") as stub, contextlib.ExitStack() as stack:
        cfg = GymConfig()
        for name, parser in (("with_parser", True), ("without_parser", False)):
            cfg.add(
                name,
                "responses_api_models",
                "vllm_model",
                base_url=stub.url + "/v1",
                api_key="EMPTY",
                model="stub-model",
                return_token_id_information=False,
                uses_reasoning_parser=parser,
            )
        urls = {n: stack.enter_context(start_server(cfg, n, tmp_path)).url for n in cfg.instances}
        body = post(urls["with_parser"] + "/v1/responses", {"input": "What is 5 - 2?"}).json()
        kinds = [item["type"] for item in body["output"]]
        assert kinds == ["reasoning", "message"]
        assert body["output"][0]["summary"][0]["text"] == "Let me compute the expression."
        history = [
            {"role": "user", "content": "What is 5 - 2?"},
            *body["output"],
            {"role": "user", "content": "And 1 + 1?"},
        ]
        assert post(urls["with_parser"] + "/v1/responses", {"input": history}).status_code == 200
        refused = post(urls["without_parser"] + "/v1/responses", {"input": "What is 5 - 2?"})
        assert refused.status_code == 502 and "uses_reasoning_parser" in refused.json()["error"]["message"]
