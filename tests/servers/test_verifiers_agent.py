"""verifiers_agent over real HTTP with a tiny verifiers-like package installed by real uv.

See tests/helpers/fake_verifiers.py for why the real ``verifiers`` is not installed here.
"""

from __future__ import annotations

import contextlib

import httpx
import pytest

from tests.helpers.fake_verifiers import make_venv, make_wheels
from tests.helpers.gym_servers import GymConfig, start_server, start_stub


@pytest.fixture(scope="module")
def venvs(tmp_path_factory):
    root = tmp_path_factory.mktemp("vf")
    wheels = make_wheels(root / "wheels")
    return {
        "full": make_venv(root / "full", wheels, ["verifiers", "tiny-arith"]),
        "no_env": make_venv(root / "no_env", wheels, ["verifiers"]),
        "bare": make_venv(root / "bare", None, []),
    }


def config(model_url: str, env_id: str = "tiny-arith", **args) -> GymConfig:
    cfg = GymConfig()
    cfg.extra = {"policy_model_name": "stub-model"}
    cfg.add(
        "policy_model",
        "responses_api_models",
        "vllm_model",
        base_url=model_url,
        api_key="EMPTY",
        model="stub-model",
        return_token_id_information=True,
        uses_reasoning_parser=False,
    )
    cfg.add(
        "verifiers_agent",
        "responses_api_agents",
        "verifiers_agent",
        vf_env_id=env_id,
        vf_env_args=args,
        model_name="${policy_model_name}",
        model_server={"type": "responses_api_models", "name": "policy_model"},
    )
    return cfg


def test_run_scores_a_rollout_with_token_ids(venvs, tmp_path):
    with start_stub(tmp_path, "--seed", "5") as stub, contextlib.ExitStack() as stack:
        cfg = config(stub.url + "/v1", system_prompt="Reply with a number.")
        stack.enter_context(start_server(cfg, "policy_model", tmp_path))
        agent = stack.enter_context(start_server(cfg, "verifiers_agent", tmp_path, python=str(venvs["full"])))
        row = {
            "task_idx": 3,
            "vf_env_id": "tiny-arith",
            "answer": "10",
            "responses_create_params": {"input": [{"role": "user", "content": "What is 4 + 6?"}]},
        }
        rewards = []
        for _ in range(10):
            reply = httpx.post(agent.url + "/run", json=row, timeout=60, trust_env=False)
            assert reply.status_code == 200, reply.text
            result = reply.json()
            rewards.append(result["reward"])
        response = result["response"]
        assert response["id"] == "verifiers-tiny-arith-3" and response["group_id"] == "3"
        assert response["env_id"] == "tiny-arith" and response["metrics"] == {"correct": result["reward"]}
        message = response["output"][-1]
        assert message["type"] == "message" and "The answer is" in message["content"][0]["text"]
        assert message["prompt_token_ids"] and len(message["generation_token_ids"]) == len(
            message["generation_log_probs"]
        )
        assert set(rewards) == {0.0, 1.0}


def test_a_missing_environment_module_fails_the_start(venvs, tmp_path):
    cfg = config("http://127.0.0.1:9/v1", env_id="primeintellect/tiny-arith")
    with start_server(cfg, "verifiers_agent", tmp_path, python=str(venvs["no_env"]), ready=False) as agent:
        assert agent.proc.wait(60) == 1
    output = agent.output()
    assert "module 'tiny_arith' is not installed" in output and "primeintellect/tiny-arith" in output
    assert "Traceback" not in output


def test_a_missing_verifiers_package_fails_the_start(venvs, tmp_path):
    cfg = config("http://127.0.0.1:9/v1")
    with start_server(cfg, "verifiers_agent", tmp_path, python=str(venvs["bare"]), ready=False) as agent:
        assert agent.proc.wait(60) == 1
    assert "module 'verifiers' is not installed" in agent.output()


def test_a_failing_load_environment_fails_the_start(venvs, tmp_path):
    cfg = config("http://127.0.0.1:9/v1", no_such_argument=1)
    with start_server(cfg, "verifiers_agent", tmp_path, python=str(venvs["full"]), ready=False) as agent:
        assert agent.proc.wait(60) == 1
    assert "failed to load: TypeError" in agent.output()


def test_an_unusable_reward_is_a_502_naming_the_environment(venvs, tmp_path):
    """docs/rollouts.md, "Rewards": a NaN reward from the environment's rubric is never reported as a
    reward (NeMo Gym 0.4.0 ``responses_api_agents/verifiers_agent/app.py`` takes
    ``rollout_output.get("reward", 0.0) or 0.0``: NaN passes on, a missing reward becomes 0.0)."""
    with start_stub(tmp_path, "--seed", "5") as stub, contextlib.ExitStack() as stack:
        cfg = config(stub.url + "/v1", fixed_reward="nan")
        stack.enter_context(start_server(cfg, "policy_model", tmp_path))
        agent = stack.enter_context(start_server(cfg, "verifiers_agent", tmp_path, python=str(venvs["full"])))
        row = {
            "task_idx": 0,
            "vf_env_id": "tiny-arith",
            "answer": "10",
            "responses_create_params": {"input": [{"role": "user", "content": "What is 4 + 6?"}]},
        }
        reply = httpx.post(agent.url + "/run", json=row, timeout=60, trust_env=False)
    assert reply.status_code == 502
    error = reply.json()["error"]
    assert error["type"] == "bad_reward" and error["upstream"] == "verifiers environment 'tiny-arith'"
    assert "reward is NaN, not a finite number" in error["message"]


def test_a_row_the_agent_cannot_run_is_a_422(venvs, tmp_path):
    """docs/rollouts.md, "Failure classes": an environment the row names that this server does not
    have, or an ``input`` of the wrong shape, is the row's data (422), not a 500 a trainer would
    retry as infrastructure."""
    with start_stub(tmp_path, "--seed", "5") as stub, contextlib.ExitStack() as stack:
        cfg = config(stub.url + "/v1")
        stack.enter_context(start_server(cfg, "policy_model", tmp_path))
        agent = stack.enter_context(start_server(cfg, "verifiers_agent", tmp_path, python=str(venvs["full"])))
        base = {"task_idx": 0, "answer": "10", "responses_create_params": {"input": "What is 4 + 6?"}}
        unknown = httpx.post(
            agent.url + "/run", json={**base, "vf_env_id": "acme/no-such-env"}, timeout=60, trust_env=False
        )
        items = httpx.post(
            agent.url + "/run", json={**base, "responses_create_params": {"input": [5]}}, timeout=60, trust_env=False
        )
    assert unknown.status_code == 422 and unknown.json()["error"]["type"] == "invalid_request"
    assert "the row's vf_env_id: verifiers environment 'acme/no-such-env'" in unknown.json()["error"]["message"]
    assert items.status_code == 422 and "a list of message objects" in items.json()["error"]["message"]
