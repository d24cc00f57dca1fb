"""The chain simple_agent -> vllm_model -> stub model, with the example resources servers."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx

from tests.helpers.gym_servers import SERVERS, GymConfig, server_env
from tests.servers.conftest import arithmetic_row, lookup_row


def run(chain, agent: str, row: dict, client: httpx.Client | None = None) -> httpx.Response:
    if client is not None:
        return client.post(chain[agent] + "/run", json=row, timeout=60)
    return httpx.post(chain[agent] + "/run", json=row, timeout=60, trust_env=False)


def test_run_completes_with_a_reward_and_gym_shapes(chain):
    reply = run(chain, "lookup_agent", lookup_row("gamma"))
    assert reply.status_code == 200
    result = reply.json()
    assert result["reward"] in (0.0, 1.0) and result["key"] == "gamma"
    assert result["responses_create_params"]["tools"][0]["name"] == "get_code"
    output = result["response"]["output"]
    assert [o["type"] for o in output] == ["function_call", "function_call_output", "message"]
    assert output[1]["call_id"] == output[0]["call_id"] and '"key":"gamma"' in output[1]["output"]
    assert output[0]["generation_token_ids"] and output[2]["prompt_token_ids"]
    assert result["response"]["usage"]["input_tokens"] > 0
    assert {"gym_session_policy_model", "gym_session_lookup"} <= set(reply.cookies)


def test_k_samples_of_one_prompt_spread(chain):
    rewards = [run(chain, "lookup_agent", lookup_row("delta")).json()["reward"] for _ in range(12)]
    assert set(rewards) == {0.0, 1.0}
    rewards = [run(chain, "arithmetic_agent", arithmetic_row("What is 9 * 9 - 1?")).json()["reward"] for _ in range(12)]
    assert set(rewards) == {0.0, 1.0}


def test_rows_with_no_grpo_signal(chain):
    sure = [run(chain, "lookup_agent", lookup_row("omega", "[stub:p=1]")).json()["reward"] for _ in range(4)]
    assert sure == [1.0] * 4
    hopeless = [
        run(chain, "arithmetic_agent", arithmetic_row("Name a colour.", answer="7")).json()["reward"] for _ in range(4)
    ]
    assert hopeless == [0.0] * 4


def test_invalid_tool_arguments_are_fed_back_as_a_tool_error(chain):
    reply = run(chain, "lookup_agent", lookup_row("eps", "[stub:bad_tool_args]"))
    assert reply.status_code == 200
    output = reply.json()["response"]["output"]
    assert [o["type"] for o in output] == ["function_call", "function_call_output", "message"]
    assert "Invalid tool call arguments" in output[1]["output"]
    assert reply.json()["reward"] == 0.0


def test_max_steps_stops_the_loop(chain):
    result = run(chain, "one_step_agent", lookup_row("zeta")).json()
    assert [o["type"] for o in result["response"]["output"]] == ["function_call", "function_call_output"]
    assert result["reward"] == 0.0


def test_context_length_ends_the_episode_without_error(chain):
    row = arithmetic_row("What is 1 + 1? " + "pad " * 3000)
    reply = run(chain, "lookup_agent", {**row, "key": "x"})
    assert reply.status_code == 200
    assert reply.json()["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert reply.json()["reward"] == 0.0


def test_responses_endpoint_runs_the_loop_alone(chain):
    body = lookup_row("theta")["responses_create_params"]
    reply = httpx.post(chain["lookup_agent"] + "/v1/responses", json=body, timeout=60, trust_env=False)
    assert reply.status_code == 200
    assert reply.json()["output"][0]["type"] == "function_call"


def test_aggregate_metrics_are_proxied(chain):
    metrics = httpx.post(
        chain["lookup_agent"] + "/aggregate_metrics",
        trust_env=False,
        json={"verify_responses": [{"reward": 1.0}, {"reward": 0.0}]},
    ).json()
    assert metrics["agent_metrics"]["mean/reward"] == 0.5


def test_model_failure_is_a_502_naming_the_model_server(chain):
    """The policy endpoint stays down past the model server's retry deadline (1 s here): the
    agent's 502 keeps the model server's ``model_unavailable`` type and says how long it waited."""
    reply = run(chain, "down_model_agent", lookup_row())
    assert reply.status_code == 502
    error = reply.json()["error"]
    assert error["type"] == "model_unavailable"
    assert error["upstream"] == "policy_down" and error["upstream_status"] == 502
    inner = error["upstream_body"]["error"]
    assert inner["type"] == "model_unavailable" and "/chat/completions" in inner["url"]
    assert "gave up at its retry deadline of 1s" in inner["message"] and "ConnectError" in inner["message"]


def test_unreachable_resources_server_is_a_502_naming_it(chain):
    reply = run(chain, "gone_resources_agent", lookup_row())
    assert reply.status_code == 502
    assert reply.json()["error"]["upstream"] == "lookup_gone" and "seed_session" in reply.json()["error"]["url"]


def test_start_fails_cleanly_on_an_unknown_reference(tmp_path):
    cfg = GymConfig()
    cfg.add("policy_model", "responses_api_models", "vllm_model", base_url="http://127.0.0.1:9/v1", model="m")
    cfg.add(
        "agent",
        "responses_api_agents",
        "simple_agent",
        resources_server={"type": "resources_servers", "name": "nope"},
        model_server={"type": "responses_api_models", "name": "policy_model"},
    )
    directory = SERVERS / "responses_api_agents" / "simple_agent"
    done = subprocess.run(
        [sys.executable, "app.py"],
        cwd=directory,
        env=server_env(cfg.yaml(), "agent", directory),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "'agent' references resources_servers 'nope'" in done.stderr and "not defined" in done.stderr
    assert "Traceback" not in done.stderr


def test_start_fails_cleanly_without_the_config_variable():
    directory = SERVERS / "resources_servers" / "example_arithmetic"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(directory)}
    done = subprocess.run(
        [sys.executable, "app.py"], cwd=directory, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "NEMO_GYM_CONFIG_DICT is not set" in done.stderr


def test_one_rollouts_session_cookies_never_reach_another_rollout(chain):
    """Two rollouts from callers holding no cookie get two resources-server sessions: the agent's
    shared HTTP client keeps no cookie of its own (it used to send the first rollout's session
    cookie on the second rollout's ``/seed_session``, so both shared one session)."""
    sessions = [run(chain, "lookup_agent", lookup_row("iota")).cookies.get("gym_session_lookup") for _ in range(3)]
    assert None not in sessions and len(set(sessions)) == 3, sessions
