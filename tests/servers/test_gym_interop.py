"""Our simple_agent against Gym's own ``example_single_tool_call`` from the nemo-gym 0.4.0 wheel.

The Gym server runs from its installed tree (the wheel ships ``resources_servers/``) in a
Python >= 3.12 venv built by real uv from PyPI (cached between runs,
``tests/helpers/gym_package.py``); it starts its own local Ray cluster, as Gym does
without ``ray_head_node_address``. Its process gets ``HOME`` in the test's tmp dir so Ray's files
stay there.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.helpers.cases import CASES
from tests.helpers.gym_package import gym_venv as cached_gym_venv
from tests.helpers.gym_servers import GymConfig, server_env, spawn, start_server, start_stub

pytestmark = [pytest.mark.pypi, pytest.mark.slow]


@pytest.fixture(scope="session")
def gym_venv() -> Path:
    venv = cached_gym_venv()
    if venv is None:
        pytest.skip("no Python >= 3.12 under pyenv (nemo-gym 0.4.0 requires it)")
    return venv


def test_simple_agent_runs_gyms_example_single_tool_call(gym_venv, tmp_path):
    python = gym_venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    gym_dir = Path(site) / "resources_servers" / "example_single_tool_call"
    rows = [json.loads(line) for line in (gym_dir / "data" / "example.jsonl").read_text().splitlines()]
    with start_stub(tmp_path, "--seed", "1") as stub, contextlib.ExitStack() as stack:
        cfg = GymConfig()
        cfg.extra = {"dry_run": False}
        cfg.add(
            "policy_model",
            "responses_api_models",
            "vllm_model",
            base_url=stub.url + "/v1",
            api_key="EMPTY",
            model="stub-model",
            return_token_id_information=False,
            uses_reasoning_parser=False,
        )
        gym_port = cfg.add("example_single_tool_call", "resources_servers", "example_single_tool_call", domain="agent")
        cfg.add(
            "agent",
            "responses_api_agents",
            "simple_agent",
            max_steps=4,
            resources_server={"type": "resources_servers", "name": "example_single_tool_call"},
            model_server={"type": "responses_api_models", "name": "policy_model"},
        )
        env = {**server_env(cfg.yaml(), "example_single_tool_call", gym_dir), "HOME": str(tmp_path)}
        stack.enter_context(
            spawn(
                [str(python), "app.py"], gym_dir, env, f"http://127.0.0.1:{gym_port}", tmp_path / "gym.log", timeout=300
            )
        )
        stack.enter_context(start_server(cfg, "policy_model", tmp_path))
        agent = stack.enter_context(start_server(cfg, "agent", tmp_path))
        for row in rows[:3]:
            reply = httpx.post(agent.url + "/run", json=row, timeout=120, trust_env=False)
            assert reply.status_code == 200, reply.text
            result = reply.json()
            assert result["reward"] == 1.0
            output = result["response"]["output"]
            assert [o["type"] for o in output] == ["function_call", "function_call_output", "message"]
            assert output[0]["name"] == "get_weather" and "weather_description" in output[1]["output"]


def test_gyms_simple_agent_runs_our_model_and_resources_servers(gym_venv, tmp_path):
    python = gym_venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    agent_dir = Path(site) / "responses_api_agents" / "simple_agent"
    tools = [
        {
            "type": "function",
            "name": "get_code",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"key": {"type": "string"}},
                "required": ["key"],
                "additionalProperties": False,
            },
        }
    ]
    row = {
        "responses_create_params": {
            "input": [{"role": "user", "content": "Code for 'kappa'? [stub:p=1]"}],
            "tools": tools,
        },
        "key": "kappa",
    }
    with start_stub(tmp_path, "--seed", "1") as stub, contextlib.ExitStack() as stack:
        cfg = GymConfig()
        cfg.extra = {"dry_run": False}
        cfg.add(
            "policy_model",
            "responses_api_models",
            "vllm_model",
            base_url=stub.url + "/v1",
            api_key="EMPTY",
            model="stub-model",
            return_token_id_information=True,
            uses_reasoning_parser=False,
        )
        cfg.add("lookup", "resources_servers", "example_code_lookup", domain="agent")
        agent_port = cfg.add(
            "gym_agent",
            "responses_api_agents",
            "simple_agent",
            max_steps=4,
            resources_server={"type": "resources_servers", "name": "lookup"},
            model_server={"type": "responses_api_models", "name": "policy_model"},
        )
        stack.enter_context(start_server(cfg, "policy_model", tmp_path))
        stack.enter_context(start_server(cfg, "lookup", tmp_path))
        env = {**server_env(cfg.yaml(), "gym_agent", agent_dir), "HOME": str(tmp_path)}
        stack.enter_context(
            spawn(
                [str(python), "app.py"],
                agent_dir,
                env,
                f"http://127.0.0.1:{agent_port}",
                tmp_path / "gym_agent.log",
                timeout=300,
            )
        )
        reply = httpx.post(f"http://127.0.0.1:{agent_port}/run", json=row, timeout=120, trust_env=False)
        assert reply.status_code == 200, reply.text
        result = reply.json()
        assert result["reward"] == 1.0 and result["called_tool"] is True
        output = result["response"]["output"]
        assert [o["type"] for o in output] == ["function_call", "function_call_output", "message"]
        assert output[2]["generation_token_ids"] and output[2]["prompt_token_ids"]


@pytest.mark.timeout(900)  # Gym's agent starts its own Ray cluster: slow on a loaded host
def test_c31_gyms_simple_agent_posts_verify_ours_refuses_it(gym_venv, tmp_path):
    """tests/cases/data/C31/README.md, against Gym's own simple_agent from the 0.4.0 wheel: a policy
    that calls ``verify`` (stub ``--mode call=verify``, the case's ``FAKE_MODE=verifytool``) reads
    the expected answer through Gym's agent and scores 1.0; through ours the call reaches nothing,
    is counted, and the row scores 0.0. Config and row are the case's."""
    import yaml

    python = gym_venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    gym_agent_dir = Path(site) / "responses_api_agents" / "simple_agent"
    case = CASES / "C31"
    row = json.loads((case / "rows.jsonl").read_text().splitlines()[0])
    case_cfg = yaml.safe_load((case / "pkg/resources_servers/example_arithmetic/configs/arithmetic.yaml").read_text())
    agent_settings = case_cfg["acme_calc_agent"]["responses_api_agents"]["simple_agent"]
    agent_settings = {k: v for k, v in agent_settings.items() if k != "entrypoint"}
    with start_stub(tmp_path, "--seed", "1", "--mode", "call=verify") as stub, contextlib.ExitStack() as stack:
        cfg = GymConfig()
        cfg.extra = {"dry_run": False}
        cfg.add(
            "policy_model",
            "responses_api_models",
            "vllm_model",
            base_url=stub.url + "/v1",
            api_key="EMPTY",
            model="stub-model",
            return_token_id_information=False,
            uses_reasoning_parser=True,
        )
        cfg.add("acme_calc", "resources_servers", "example_arithmetic", domain="math")
        gym_port = cfg.add("gym_agent", "responses_api_agents", "simple_agent", **agent_settings)
        cfg.add("acme_calc_agent", "responses_api_agents", "simple_agent", **agent_settings)
        for name in ("policy_model", "acme_calc", "acme_calc_agent"):
            stack.enter_context(start_server(cfg, name, tmp_path))
        env = {**server_env(cfg.yaml(), "gym_agent", gym_agent_dir), "HOME": str(tmp_path)}
        stack.enter_context(
            spawn(
                [str(python), "app.py"],
                gym_agent_dir,
                env,
                f"http://127.0.0.1:{gym_port}",
                tmp_path / "gym_agent.log",
                timeout=300,
            )
        )
        ours_port = cfg.instances["acme_calc_agent"]["responses_api_agents"]["simple_agent"]["port"]
        gym = httpx.post(f"http://127.0.0.1:{gym_port}/run", json=row, timeout=120, trust_env=False).json()
        ours = httpx.post(f"http://127.0.0.1:{ours_port}/run", json=row, timeout=120, trust_env=False).json()
    leaked = gym["response"]["output"][1]["output"]
    assert gym["reward"] == 1.0 and '"expected":42.0' in leaked  # Gym forwards the call to the grader
    refused = json.loads(ours["response"]["output"][1]["output"])
    assert refused == {"error": "unknown tool 'verify' (is a route of the resources server, not a tool); available: []"}
    assert ours["reward"] == 0.0 and ours["unknown_tool_calls"] == 1
