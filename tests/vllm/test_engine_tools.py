"""``gym-runtime up`` and ``dry-run`` against a real vLLM engine served with its tool-call parser
(``--enable-auto-tool-choice --tool-call-parser hermes``) and reasoning parser (``--reasoning-parser
qwen3``) on the tiny model (docs/rollouts.md, "A real vLLM engine"):

- ``--probe-policy`` passes (tools, token ids, reasoning field);
- the token ids of the built-in ``vllm_model`` and of NeMo Gym 0.7.0's own ``vllm_model`` tree equal
  vLLM's own ``/tokenize`` of the prompt and the logprob tokens of vLLM's own completion;
- tool calls parsed by ``hermes``: chosen by the model (``tool_choice: auto``), and forced
  (``tool_choice: required``, which structured outputs make valid JSON, after the reasoning where
  thinking is on);
- the reasoning parser's field becomes a ``reasoning`` item;
- a prompt over ``--max-model-len`` ends the episode as a context overflow (scored, counted).
"""

from __future__ import annotations

import json

import httpx
import pytest
import yaml

from tests.examples.conftest import dry_run
from tests.helpers.environments import running_up, stop_cleanly
from tests.helpers.load import run_batch
from tests.vllm.conftest import MAX_MODEL_LEN
from tests.vllm.helpers import (
    POLICY,
    QUICKSTART,
    TOOL,
    logprob_ids,
    policy_args,
    probe_refused,
    row,
    rows_file,
    runtime_env,
    token_item,
    vllm_chat,
    vllm_tokenize,
)

pytestmark = [pytest.mark.vllm, pytest.mark.pypi, pytest.mark.slow, pytest.mark.timeout(1800)]

TRAINING = (f"{POLICY}.return_token_id_information=true", f"{POLICY}.uses_reasoning_parser=true")
PLAIN = {"input": [{"role": "user", "content": "Reply with the word OK."}], "temperature": 0, "max_output_tokens": 40}
# a forced call without a think block first: the row turns thinking off through its metadata (NeMo Gym's
# per-row chat_template_kwargs); with it on, the tool grammar waits for the reasoning to end
NO_THINKING = {"chat_template_kwargs": json.dumps({"enable_thinking": False})}
FORCED = {
    "input": [{"role": "user", "content": "Which code has the key alpha?"}],
    "tools": [TOOL],
    "tool_choice": "required",
    "parallel_tool_calls": False,
    "temperature": 0,
    "max_output_tokens": 60,
    "metadata": NO_THINKING,
}


@pytest.fixture(scope="module")
def daemon(engine, tmp_path_factory):
    """``up --probe-policy`` of the bundled example on the engine, token ids and reasoning on."""
    tmp = tmp_path_factory.mktemp("up")
    served = engine("tools")
    with running_up(QUICKSTART, tmp, *policy_args(served), "--probe-policy", *TRAINING, env=runtime_env(tmp)) as (
        proc,
        info,
    ):
        yield served, info
        code, err = stop_cleanly(proc)
        assert code == 0, err[-3000:]


def chat_form(request: dict) -> dict:
    """The chat request the Responses ``request`` stands for, sent to vLLM directly."""
    body = {"messages": request["input"], "temperature": 0, "max_tokens": request["max_output_tokens"]}
    if "tools" in request:
        body["tools"] = [
            {"type": "function", "function": {k: v for k, v in TOOL.items() if k not in ("type", "strict")}}
        ]
        body.update(tool_choice=request["tool_choice"], parallel_tool_calls=request["parallel_tool_calls"])
    if "metadata" in request:
        body["chat_template_kwargs"] = json.loads(request["metadata"]["chat_template_kwargs"])
    return body


def assert_token_ids_are_vllms(served, model_server: str, request: dict) -> dict:
    response = httpx.post(model_server + "/v1/responses", json=request, timeout=300, trust_env=False)
    assert response.status_code == 200, response.text[:3000]
    item = token_item(response.json())
    body = chat_form(request)
    assert item["prompt_token_ids"] == vllm_tokenize(served, body)
    own = vllm_chat(served, body)
    assert item["generation_token_ids"] == logprob_ids(own)
    assert len(item["generation_log_probs"]) == len(item["generation_token_ids"])
    return response.json()


def test_probe_policy_passes_with_the_tool_flags(daemon):
    served, info = daemon
    assert info["status"] == "ready" and info["policy_model"]["base_url"] == served.base_url


def test_probe_policy_finds_a_reasoning_parser_the_config_does_not_expect(engine, tmp_path):
    """The example says ``uses_reasoning_parser: false``; the engine runs ``--reasoning-parser qwen3``."""
    err = probe_refused(engine("tools"), tmp_path)
    assert "GR-START-REASONING-PARSER" in err and "uses_reasoning_parser" in err


@pytest.mark.parametrize("request_body", [PLAIN, FORCED], ids=["text", "forced-tool-call"])
def test_token_ids_of_the_built_in_vllm_model_are_vllms_own(daemon, request_body):
    served, info = daemon
    response = assert_token_ids_are_vllms(served, info["servers"]["policy_model"], request_body)
    if "tools" in request_body:
        (call,) = [o for o in response["output"] if o["type"] == "function_call"]
        assert call["name"] == "get_code" and isinstance(json.loads(call["arguments"]).get("key"), str)


def test_rollouts_call_tools_parsed_by_hermes_and_keep_the_reasoning_field(daemon):
    served, info = daemon
    rows = [
        row("code_lookup_agent", "What is the code for alpha please?", tools=True),
        row(
            "code_lookup_agent",
            "Which code has the key alpha?",
            tools=True,
            tool_choice="required",
            parallel_tool_calls=False,
            metadata=NO_THINKING,
        ),
        row("arithmetic_agent", "What is 17 * 23?"),
    ]
    chosen, forced, plain = run_batch(info["head_server"], rows).results
    for result in (chosen, forced, plain):
        assert "error" not in result, result
    calls = [o for o in chosen["response"]["output"] if o["type"] == "function_call"]
    assert calls and calls[0]["name"] == "get_code" and json.loads(calls[0]["arguments"]) == {"key": "alpha"}, chosen[
        "response"
    ]["output"]
    outputs = [o for o in chosen["response"]["output"] if o["type"] == "function_call_output"]
    assert json.loads(outputs[0]["output"])["code"].startswith("CODE-")  # the resources server ran the call
    assert chosen["unparsed_tool_calls"] == 0 and chosen["unknown_tool_calls"] == 0
    forced_calls = [o for o in forced["response"]["output"] if o["type"] == "function_call"]
    parsed = [json.loads(c["arguments"]) for c in forced_calls]  # the grammar makes every call valid JSON
    # (vLLM's `required` grammar carries the tool's parameters schema); arguments that are not an object
    # are refused by the agent and counted, never posted to the resources server
    assert parsed and forced["invalid_tool_arguments"] == sum(not isinstance(p, dict) for p in parsed)
    assert forced["max_steps_stops"] == 1  # every turn must call a tool: the step cap ends it
    reasoning = [o for o in plain["response"]["output"] if o["type"] == "reasoning"]
    assert reasoning and reasoning[0]["summary"][0]["text"].strip() == "The user wants a short reply."
    message = [o for o in plain["response"]["output"] if o["type"] == "message"][-1]
    assert message["content"][0]["text"] == "OK" and "<think>" not in message["content"][0]["text"]


def test_with_thinking_on_the_forced_call_waits_for_the_reasoning_to_end(daemon):
    """vLLM with ``--reasoning-parser`` and ``tool_choice: required``, thinking on: the tool grammar
    applies once the reasoning has ended (vLLM's structured outputs wait for the reasoning parser),
    so each turn is a reasoning item and then a parsed forced call; none is lost to the reasoning."""
    served, info = daemon
    thinking = row(
        "code_lookup_agent",
        "Which code has the key alpha?",
        tools=True,
        tool_choice="required",
        parallel_tool_calls=False,
    )
    (result,) = run_batch(info["head_server"], [thinking]).results
    assert "error" not in result and result["unparsed_tool_calls"] == 0, result
    output = result["response"]["output"]
    calls = [o for o in output if o["type"] == "function_call"]
    assert calls and all(c["name"] == "get_code" and json.loads(c["arguments"]) == {"key": "alpha"} for c in calls)
    assert len([o for o in output if o["type"] == "reasoning"]) >= len(calls)
    assert result["max_steps_stops"] == 1  # every turn must call a tool: the step cap ends it


def test_a_prompt_over_max_model_len_is_a_scored_context_overflow(daemon):
    served, info = daemon
    long = row("arithmetic_agent", "What is " + " + ".join(["1"] * MAX_MODEL_LEN) + "?")
    (result,) = run_batch(info["head_server"], [long]).results
    assert "error" not in result and result["context_overflow_stops"] == 1 and result["reward"] == 0.0, result
    overflow = result["response"]["context_overflow"]
    assert overflow["wording"] == "vllm-context-length" and overflow["upstream_status"] == 400
    assert f"maximum context length is {MAX_MODEL_LEN} tokens" in overflow["message"]


def test_dry_run_counts_the_overflow_and_the_tool_rows(engine, tmp_path):
    served = engine("tools")
    rows = [
        row("code_lookup_agent", "What is the code for alpha please?", tools=True),
        row("arithmetic_agent", "What is " + " + ".join(["1"] * MAX_MODEL_LEN) + "?"),
    ]
    run = dry_run(
        QUICKSTART,
        rows_file(tmp_path, rows),
        "--samples",
        "2",
        "--json",
        *policy_args(served),
        f"{POLICY}.uses_reasoning_parser=true",
        env=runtime_env(tmp_path),
        timeout=1200,
    )
    assert run.code == 0, run.stderr[-3000:]
    report = run.json()
    tool_row, long_row = report["rows"]
    assert tool_row["failures"] == 0 and tool_row["unparsed_tool_calls"] == 0
    assert long_row["context_overflows"] == 2 and long_row["failures"] == 0


def test_token_ids_of_gym_070s_own_vllm_model_are_vllms_own(engine, tmp_path):
    """NeMo Gym 0.7.0's ``responses_api_models/vllm_model`` tree, unchanged from the wheel, under ``up``.

    The model server is called directly (no rows), so only the resources server of the config is
    kept beside it: the agent's environment server (NeMo Gym's ``legacy_agent``, declared or
    generated for the agent) would start Ray, whose head's start can time out on a loaded
    two-core machine, and has nothing to do with the model server. The Python is
    ``tests/helpers/gym_python.py``'s: the host's, else the one ``.ci/provision-python`` builds beside
    the suite."""
    from tests.helpers.gym07 import gym07_wheel
    from tests.helpers.gym_package import assemble_tree_package, cache_dir
    from tests.helpers.gym_python import gym_python

    served = engine("tools")
    pkg, _ = assemble_tree_package(
        gym07_wheel(), "example_single_tool_call", "example_single_tool_call.yaml", tmp_path / "pkg"
    )
    config = pkg / "resources_servers" / "example_single_tool_call" / "configs" / "example_single_tool_call.yaml"
    blocks = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({k: v for k, v in blocks.items() if "resources_servers" in v}))
    env = {**runtime_env(tmp_path), "GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs07")}
    with running_up(
        pkg, tmp_path, *policy_args(served), "--python", str(gym_python()), *TRAINING, env=env, timeout=1500
    ) as (proc, info):
        assert_token_ids_are_vllms(served, info["servers"]["policy_model"], PLAIN)
        assert_token_ids_are_vllms(served, info["servers"]["policy_model"], FORCED)
        code, err = stop_cleanly(proc)
    assert code == 0, err[-3000:]
