"""NeMo Gym 0.7.0's model-server surface on the built-in vllm_model, over real HTTP against the stub
model (docs/rollouts.md, "The model server's surface"): the rollout prefix, ``/v1/messages``,
``stream: true``, ``use_completions_api``, ``default_headers``, per-row ``metadata`` overrides,
``uses_interleaved_reasoning``, ``propagate_context_overflow_errors`` and the config keys check.
"""

from __future__ import annotations

import contextlib
import json

import httpx
import openai
import pytest

from tests.helpers.fake_policy import start_fake
from tests.helpers.gym_servers import GymConfig, start_server, start_stub

TOOL = {
    "type": "function",
    "name": "get_code",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Built-in vllm_model instances over one stub (reasoning on) and one fake endpoint."""
    tmp = tmp_path_factory.mktemp("surface")
    with contextlib.ExitStack() as stack:
        stub = stack.enter_context(start_stub(tmp, "--seed", "5", "--max-model-len", "512", "--reasoning"))
        fake = stack.enter_context(start_fake(tmp, "ok", "stub-model"))
        cfg = GymConfig()
        common = {"api_key": "EMPTY", "model": "stub-model", "base_url": stub.url + "/v1"}
        cfg.add(
            "reasoner",
            "responses_api_models",
            "vllm_model",
            uses_reasoning_parser=True,
            return_token_id_information=True,
            **common,
        )
        cfg.add(
            "completions",
            "responses_api_models",
            "vllm_model",
            use_completions_api=True,
            return_token_id_information=True,
            **common,
        )
        cfg.add(
            "rendered",
            "responses_api_models",
            "vllm_model",
            use_completions_api=True,
            render_chat_template=True,
            return_token_id_information=True,
            **common,
        )
        cfg.add(
            "propagating",
            "responses_api_models",
            "vllm_model",
            uses_reasoning_parser=True,
            propagate_context_overflow_errors=True,
            **common,
        )
        cfg.add(
            "to_fake",
            "responses_api_models",
            "vllm_model",
            api_key="EMPTY",
            model="stub-model",
            base_url=fake.url + "/v1",
            default_headers={"x-acme-route": "blue"},
            uses_interleaved_reasoning=False,
            uses_reasoning_parser=True,
            chat_template_kwargs={"enable_thinking": True},
            extra_body={"top_k": 5},
        )
        urls = {name: stack.enter_context(start_server(cfg, name, tmp)).url for name in cfg.instances}
        yield {**urls, "stub": stub.url, "fake": fake.url}


def post(url: str, body: dict) -> httpx.Response:
    return httpx.post(url, json=body, timeout=60, trust_env=False)


def test_the_rollout_prefix_is_stripped(models):
    for prefix in ("/ng-rollout/3-0", "/ng-rollout/3-0/training-token-capture"):
        reply = post(models["reasoner"] + prefix + "/v1/responses", {"input": "What is 6 * 7?"})
        assert reply.status_code == 200 and reply.json()["object"] == "response", (prefix, reply.text)
    assert post(models["reasoner"] + "/ng-rollout/.hidden/v1/responses", {"input": "x"}).status_code == 404


def test_messages_api_text_thinking_and_tool_use(models):
    body = post(
        models["reasoner"] + "/v1/messages",
        {
            "model": "claude-x",
            "max_tokens": 64,
            "system": "Be brief.",
            "messages": [{"role": "user", "content": "What is 6 * 7?"}],
        },
    )
    message = body.json()
    assert message["type"] == "message" and message["role"] == "assistant" and message["model"] == "claude-x"
    kinds = [b["type"] for b in message["content"]]
    assert kinds == ["thinking", "text"] and message["stop_reason"] == "end_turn"
    assert message["usage"]["input_tokens"] > 0 and message["id"].startswith("resp_")
    tool = {"name": "get_code", "input_schema": TOOL["parameters"]}
    call = post(
        models["reasoner"] + "/v1/messages",
        {
            "max_tokens": 64,
            "tools": [tool],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Code for 'alpha'?"}]}],
        },
    ).json()
    use = [b for b in call["content"] if b["type"] == "tool_use"]
    assert call["stop_reason"] == "tool_use" and use[0]["name"] == "get_code" and use[0]["input"] == {"key": "alpha"}
    after = post(
        models["reasoner"] + "/v1/messages",
        {
            "max_tokens": 64,
            "tools": [tool],
            "messages": [
                {"role": "user", "content": "Code for 'alpha'?"},
                {"role": "assistant", "content": call["content"]},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": use[0]["id"], "content": "CODE-1 [stub:p=1]"}],
                },
            ],
            "temperature": 0,
        },
    ).json()
    assert after["content"][-1] == {"type": "text", "text": "The tool returned: CODE-1 [stub:p=1]"}


def test_messages_api_stream(models):
    with httpx.stream(
        "POST",
        models["reasoner"] + "/v1/messages",
        json={"max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "What is 6 * 7?"}]},
        timeout=60,
        trust_env=False,
    ) as reply:
        events = [line.removeprefix("event: ") for line in reply.iter_lines() if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"]
    assert events.count("content_block_start") == events.count("content_block_stop") == 2


def test_responses_stream_is_read_by_the_openai_client(models):
    """``stream: true`` on /v1/responses: OpenAI's own client assembles the same answer."""
    client = openai.OpenAI(base_url=models["reasoner"] + "/v1", api_key="x", http_client=httpx.Client(trust_env=False))
    with client.responses.stream(model="m", input="What is 6 * 7?", temperature=0) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds and "response.reasoning_summary_text.delta" in kinds
    assert final.output_text.startswith("The answer is 42")
    plain = post(models["reasoner"] + "/v1/responses", {"input": "What is 6 * 7?", "temperature": 0}).json()
    assert [o["type"] for o in plain["output"]] == [o.type for o in final.output]


def test_chat_completions_stream_is_read_by_the_openai_client(models):
    client = openai.OpenAI(base_url=models["reasoner"] + "/v1", api_key="x", http_client=httpx.Client(trust_env=False))
    chunks = list(
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "6 * 7?"}], stream=True, temperature=0
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "The answer is 42" in text and chunks[-1].usage is not None


def test_a_stream_that_fails_ends_in_response_failed(models):
    body = {"input": "x [stub:error=400]", "stream": True}
    with httpx.stream("POST", models["reasoner"] + "/v1/responses", json=body, timeout=60, trust_env=False) as reply:
        data = [json.loads(line.removeprefix("data: ")) for line in reply.iter_lines() if line.startswith("data: ")]
    assert data[-1]["type"] == "response.failed" and "HTTP 400" in data[-1]["response"]["error"]["message"]


def test_use_completions_api_raw_and_rendered(models):
    raw = post(models["completions"] + "/v1/responses", {"input": "What is 6 * 7?", "temperature": 0}).json()
    item = raw["output"][-1]
    assert item["content"][0]["text"] == "The answer is 42." and len(item["generation_token_ids"]) > 0
    tools = post(models["completions"] + "/v1/responses", {"input": "x", "tools": [TOOL]})
    assert tools.status_code == 422 and "render_chat_template: true" in tools.text
    turns = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "What is 6 * 7?"},
    ]
    rendered = post(models["rendered"] + "/v1/responses", {"input": turns, "temperature": 0}).json()
    ids = post(models["stub"] + "/tokenize", {"messages": turns}).json()["tokens"]
    assert rendered["output"][-1]["prompt_token_ids"] == ids


def test_headers_metadata_overrides_and_interleaved_reasoning_reach_the_endpoint(models):
    history = [
        {"role": "user", "content": "Hi"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Again"},
    ]
    metadata = {
        "extra_body": json.dumps({"top_k": 9, "min_p": 0.1}),
        "chat_template_kwargs": json.dumps({"enable_thinking": False}),
    }
    assert post(models["to_fake"] + "/v1/responses", {"input": history, "metadata": metadata}).status_code == 200
    sent = httpx.get(models["fake"] + "/fake/requests", trust_env=False).json()[-1]
    headers = httpx.get(models["fake"] + "/fake/headers", trust_env=False).json()[-1]
    assert headers["x-acme-route"] == "blue" and headers["authorization"] == "Bearer EMPTY"
    assert sent["top_k"] == 9 and sent["min_p"] == 0.1 and sent["chat_template_kwargs"] == {"enable_thinking": False}
    assistant = [m for m in sent["messages"] if m["role"] == "assistant"][0]
    assert assistant["content"] == "Hello" and "reasoning" not in assistant and "reasoning_content" not in assistant
    bad = post(models["to_fake"] + "/v1/responses", {"input": "x", "metadata": {"extra_body": "[1]"}})
    assert bad.status_code == 422 and "metadata.extra_body must be a JSON object" in bad.text


def test_a_request_s_own_chat_template_kwargs_are_dropped_unless_forwarded(models):
    post(
        models["to_fake"] + "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"enable_thinking": False}},
    )
    sent = httpx.get(models["fake"] + "/fake/requests", trust_env=False).json()[-1]
    assert sent["chat_template_kwargs"] == {"enable_thinking": True}  # the config's; NeMo Gym 0.7.0 does the same


def test_propagate_context_overflow_errors_answers_the_upstream_400(models):
    reply = post(models["propagating"] + "/v1/responses", {"input": "x " * 600})
    assert reply.status_code == 400 and "maximum context length is 512" in reply.json()["error"]["message"]
    scored = post(models["reasoner"] + "/v1/responses", {"input": "x " * 600}).json()
    assert scored["status"] == "incomplete" and scored["context_overflow"]["wording"] == "vllm-context-length"
