"""Model output and environment output are untrusted (docs/rollouts.md), over real processes:
stub model -> vllm_model -> simple_agent -> a test resources server (``apps/reward_echo``).

- the agent executes only the tools a row offered; every other name (the resources server's own
  routes, names with ``/``, ``..``, ``?``, ``#``) gets an "unknown tool" output and reaches nothing;
- arguments that are not a JSON object become a tool output saying what was wrong; ``""`` is ``{}``;
- every vLLM context-overflow wording ends the episode as an empty ``length`` completion, marked
  ``context_overflow`` and counted;
- reasoning in ``<think>`` tags never reaches the grader as the answer with the reasoning parser on,
  and passes unchanged with it off; a reasoning field with the parser off names the setting;
- an unusable reward is a 502 ``bad_reward`` naming the resources server and the value.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import httpx
import pytest

from gym_runtime.stub_model.quirks import OVERFLOW
from tests.helpers.gym_servers import GymConfig, start_server, start_stub

ECHO_DIR = Path(__file__).parent / "apps" / "reward_echo"
ECHO_TOOL = {
    "type": "function",
    "name": "echo",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}
MODEL = {"api_key": "EMPTY", "model": "stub-model", "return_token_id_information": False}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("untrusted")
    with contextlib.ExitStack() as stack:
        stub = stack.enter_context(start_stub(tmp, "--seed", "3"))
        cfg = GymConfig()
        cfg.add(
            "policy_parser",
            "responses_api_models",
            "vllm_model",
            base_url=stub.url + "/v1",
            uses_reasoning_parser=True,
            **MODEL,
        )
        cfg.add(
            "policy_plain",
            "responses_api_models",
            "vllm_model",
            base_url=stub.url + "/v1",
            uses_reasoning_parser=False,
            **MODEL,
        )
        cfg.add("echo", "resources_servers", "reward_echo", domain="other")
        for name, model in (("agent", "policy_parser"), ("plain_agent", "policy_plain")):
            cfg.add(
                name,
                "responses_api_agents",
                "simple_agent",
                max_steps=3,
                resources_server={"type": "resources_servers", "name": "echo"},
                model_server={"type": "responses_api_models", "name": model},
            )
        urls = {
            n: stack.enter_context(start_server(cfg, n, tmp, server_dir=ECHO_DIR if n == "echo" else None)).url
            for n in cfg.instances
        }
        yield urls


def run(env, text: str, tools: list | None = None, agent: str = "agent", **row) -> httpx.Response:
    params = {"input": [{"role": "user", "content": text}], **({"tools": tools} if tools is not None else {})}
    return httpx.post(env[agent] + "/run", json={"responses_create_params": params, **row}, timeout=60, trust_env=False)


def calls(env) -> dict:
    return httpx.get(env["echo"] + "/calls", trust_env=False).json()


@pytest.mark.parametrize(
    "name",
    ["verify", "seed_session", "aggregate_metrics", "../verify", "verify?x=1", "echo#frag", "a/b", "nope", "echo "],
)
def test_a_tool_that_was_not_offered_reaches_nothing(env, name: str) -> None:
    """tests/cases/data/C31/README.md: only offered tools run; the model is told what is available."""
    before = calls(env)
    reply = run(env, f"Say hello. [stub:call={name}]", tools=[ECHO_TOOL])
    assert reply.status_code == 200, reply.text
    result = reply.json()
    call, output = result["response"]["output"][:2]
    assert call["type"] == "function_call" and call["name"] == name
    error = json.loads(output["output"])["error"]
    assert error.startswith(f"unknown tool {name!r}") and error.endswith("available: ['echo']")
    assert (result["unknown_tool_calls"], result["invalid_tool_arguments"]) == (1, 0)
    after = calls(env)
    assert after.get("/verify", 0) == before.get("/verify", 0) + 1  # the agent's own verify, once
    assert {k: v for k, v in after.items() if k not in ("/verify", "/seed_session", "/calls")} == {
        k: v for k, v in before.items() if k not in ("/verify", "/seed_session", "/calls")
    }


def test_a_row_without_tools_offers_none_and_control_routes_are_never_tools(env) -> None:
    """tests/cases/data/C31/README.md: the row offers no tools, so nothing is available; a row that
    offers a tool named ``verify`` still never gets it executed."""
    result = run(env, "What is 2 + 2? [stub:call=echo]").json()
    assert json.loads(result["response"]["output"][1]["output"]) == {"error": "unknown tool 'echo'; available: []"}
    offered_verify = {**ECHO_TOOL, "name": "verify"}
    result = run(env, "Check. [stub:call=verify]", tools=[offered_verify, ECHO_TOOL]).json()
    error = json.loads(result["response"]["output"][1]["output"])["error"]
    assert "is a route of the resources server" in error and error.endswith("available: ['echo']")


def test_an_offered_tool_runs_and_empty_arguments_mean_an_empty_object(env) -> None:
    result = run(env, "Echo 'hi'.", tools=[ECHO_TOOL]).json()
    assert json.loads(result["response"]["output"][1]["output"]) == {"text": "hi"}
    result = run(env, "Echo 'hi'. [stub:tool_args=empty]", tools=[ECHO_TOOL]).json()
    assert json.loads(result["response"]["output"][1]["output"]) == {}
    assert (result["unknown_tool_calls"], result["invalid_tool_arguments"]) == (0, 0)


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("list", "arguments must be a JSON object, got a list"),
        ("string", "arguments must be a JSON object, got a string"),
        ("number", "arguments must be a JSON object, got a number"),
        ("null", "arguments must be a JSON object, got null"),
        ("invalid", "not valid JSON (Expecting ',' delimiter at line 1 column 14)"),
        ("huge", "more than the limit of 1000000"),
        ("deep", "the JSON is nested too deeply"),
    ],
)
def test_arguments_that_are_not_a_json_object_become_a_tool_output(env, kind: str, said: str) -> None:
    before = calls(env).get("/echo", 0)
    reply = run(env, f"Echo 'hi'. [stub:tool_args={kind}]", tools=[ECHO_TOOL])
    assert reply.status_code == 200, reply.text[:300]
    result = reply.json()
    error = json.loads(result["response"]["output"][1]["output"])["error"]
    assert error.startswith("Invalid tool call arguments for 'echo': ") and said in error
    assert (result["unknown_tool_calls"], result["invalid_tool_arguments"]) == (0, 1)
    assert calls(env).get("/echo", 0) == before


@pytest.mark.parametrize("wording", sorted(OVERFLOW))
def test_every_context_overflow_wording_ends_the_episode_as_length(env, wording: str) -> None:
    """tests/cases/data/C30/README.md: vLLM's prompt-too-long 400s end the rollout (scored), marked."""
    reply = run(env, f"What is 6 * 7? [stub:overflow={wording}]")
    assert reply.status_code == 200, reply.text
    result = reply.json()
    response = result["response"]
    assert response["status"] == "incomplete" and response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["context_overflow"]["upstream_status"] == 400
    expected = wording.removesuffix("-input").removesuffix("-output")
    assert response["context_overflow"]["wording"] == expected
    assert result["context_overflow_stops"] == 1 and result["reward"] == 1.0  # reward_echo's default


def test_a_400_that_is_not_about_the_context_stays_an_error(env) -> None:
    """Gym matches any body mentioning ``max_tokens``; "not supported with this model" is a config error."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "servers"))
    from _kit.overflow import classify

    body = {
        "error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
            "'max_completion_tokens' instead.",
            "code": "unsupported_parameter",
        }
    }
    assert classify(400, body) is None
    assert classify(500, {"message": "This model's maximum context length is 4096 tokens."}) is None
    assert classify(400, "This model's maximum context length is 4096 tokens.").id == "vllm-context-length"


@pytest.mark.parametrize(("shape", "answer"), [("pair", "The answer is"), ("close", "The answer is"), ("open", "")])
def test_think_tags_never_reach_the_grader_with_the_reasoning_parser(env, shape: str, answer: str) -> None:
    result = run(env, f"What is 6 * 7? [stub:think={shape}][stub:p=1]").json()
    output = result["response"]["output"]
    reasoning = [o for o in output if o["type"] == "reasoning"]
    text = "".join(p["text"] for o in output if o["type"] == "message" for p in o["content"])
    assert reasoning and reasoning[0]["summary"][0]["text"] == "Let me compute the expression."
    assert "think>" not in text and text.startswith(answer) and "Let me compute" not in text


def test_without_the_parser_content_passes_unchanged(env) -> None:
    result = run(env, "What is 6 * 7? [stub:think=close][stub:p=1]", agent="plain_agent").json()
    output = result["response"]["output"]
    assert [o["type"] for o in output] == ["message"]
    assert output[0]["content"][0]["text"] == "Let me compute the expression.</think>The answer is 42."


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_a_reasoning_field_is_split_with_the_parser_and_names_the_setting_without(env, field: str) -> None:
    result = run(env, f"What is 6 * 7? [stub:reasoning={field}]").json()
    assert result["response"]["output"][0]["type"] == "reasoning"
    reply = run(env, f"What is 6 * 7? [stub:reasoning={field}]", agent="plain_agent")
    assert reply.status_code == 502
    message = json.dumps(reply.json())
    assert f"returned reasoning (field '{field}')" in message and "uses_reasoning_parser: false" in message
    assert "set uses_reasoning_parser: true" in message


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ("NaN", "reward is NaN, not a finite number"),
        ("-Infinity", "reward is -Infinity, not a finite number"),
        ("null", "reward is null"),
        ('"0.5"', "reward is str '0.5', not a number"),
        ("true", "reward is bool True, not a number"),
        (None, "no 'reward' field"),
    ],
)
def test_an_unusable_reward_names_the_resources_server_and_the_value(env, raw: str | None, said: str) -> None:
    extra = {"reward_json": raw} if raw is not None else {"drop_reward": True}
    reply = run(env, "What is 6 * 7?", **extra)
    assert reply.status_code == 502
    error = reply.json()["error"]
    assert error["type"] == "bad_reward" and error["upstream"] == "echo"
    assert said in error["message"] and "/verify" in error["message"]


def test_a_finite_reward_is_kept_with_the_counters(env) -> None:
    result = run(env, "What is 6 * 7?", reward_json="0.7").json()
    assert result["reward"] == 0.7
    assert {k: result[k] for k in ("unknown_tool_calls", "invalid_tool_arguments", "context_overflow_stops")} == {
        "unknown_tool_calls": 0,
        "invalid_tool_arguments": 0,
        "context_overflow_stops": 0,
    }
