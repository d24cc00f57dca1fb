"""Our simple_agent against Gym's own ``example_single_tool_call`` from the nemo-gym 0.4.0 wheel.

The Gym server runs from its installed tree (the wheel ships ``resources_servers/``) in a
Python >= 3.12 venv built by real uv from PyPI; it starts its own local Ray cluster, as Gym does
without ``ray_head_node_address``. Its process gets ``HOME`` in the test's tmp dir so Ray's files
stay there.
"""

from __future__ import annotations

import contextlib
import glob
import json
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import uv

from tests.helpers.gym_servers import GymConfig, server_env, spawn, start_server, start_stub

pytestmark = [pytest.mark.pypi, pytest.mark.slow]


def python_312_plus() -> str | None:
    """A CPython 3.12 or 3.13 from pyenv, or None."""
    pyenv = shutil.which("pyenv")
    root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip() if pyenv else ""
    found = sorted(glob.glob(f"{root}/versions/3.1[23].*/bin/python3")) if root else []
    return found[0] if found else None


@pytest.fixture(scope="session")
def gym_venv(tmp_path_factory) -> Path:
    python = python_312_plus()
    if python is None:
        pytest.skip("no Python >= 3.12 under pyenv (nemo-gym 0.4.0 requires it)")
    venv = tmp_path_factory.mktemp("gym040") / "venv"
    uv_bin = uv.find_uv_bin()
    subprocess.run([uv_bin, "venv", "--quiet", "--python", python, str(venv)], check=True)
    subprocess.run([uv_bin, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), "nemo-gym==0.4.0"],
                   check=True, timeout=1200)
    return venv


def test_simple_agent_runs_gyms_example_single_tool_call(gym_venv, tmp_path):
    python = gym_venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    gym_dir = Path(site) / "resources_servers" / "example_single_tool_call"
    rows = [json.loads(line) for line in (gym_dir / "data" / "example.jsonl").read_text().splitlines()]
    with start_stub(tmp_path, "--seed", "1") as stub, contextlib.ExitStack() as stack:
        cfg = GymConfig()
        cfg.extra = {"dry_run": False}
        cfg.add("policy_model", "responses_api_models", "vllm_model", base_url=stub.url + "/v1", api_key="EMPTY",
                model="stub-model", return_token_id_information=False, uses_reasoning_parser=False)
        gym_port = cfg.add("example_single_tool_call", "resources_servers", "example_single_tool_call", domain="agent")
        cfg.add("agent", "responses_api_agents", "simple_agent", max_steps=4,
                resources_server={"type": "resources_servers", "name": "example_single_tool_call"},
                model_server={"type": "responses_api_models", "name": "policy_model"})
        env = {**server_env(cfg.yaml(), "example_single_tool_call", gym_dir), "HOME": str(tmp_path)}
        stack.enter_context(spawn([str(python), "app.py"], gym_dir, env, f"http://127.0.0.1:{gym_port}",
                                  tmp_path / "gym.log", timeout=300))
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
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    agent_dir = Path(site) / "responses_api_agents" / "simple_agent"
    tools = [{"type": "function", "name": "get_code", "strict": True, "parameters": {
        "type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"], "additionalProperties": False}}]
    row = {"responses_create_params": {"input": [{"role": "user", "content": "Code for 'kappa'? [stub:p=1]"}],
                                       "tools": tools}, "key": "kappa"}
    with start_stub(tmp_path, "--seed", "1") as stub, contextlib.ExitStack() as stack:
        cfg = GymConfig()
        cfg.extra = {"dry_run": False}
        cfg.add("policy_model", "responses_api_models", "vllm_model", base_url=stub.url + "/v1", api_key="EMPTY",
                model="stub-model", return_token_id_information=True, uses_reasoning_parser=False)
        cfg.add("lookup", "resources_servers", "example_code_lookup", domain="agent")
        agent_port = cfg.add("gym_agent", "responses_api_agents", "simple_agent", max_steps=4,
                             resources_server={"type": "resources_servers", "name": "lookup"},
                             model_server={"type": "responses_api_models", "name": "policy_model"})
        stack.enter_context(start_server(cfg, "policy_model", tmp_path))
        stack.enter_context(start_server(cfg, "lookup", tmp_path))
        env = {**server_env(cfg.yaml(), "gym_agent", agent_dir), "HOME": str(tmp_path)}
        stack.enter_context(spawn([str(python), "app.py"], agent_dir, env, f"http://127.0.0.1:{agent_port}",
                                  tmp_path / "gym_agent.log", timeout=300))
        reply = httpx.post(f"http://127.0.0.1:{agent_port}/run", json=row, timeout=120, trust_env=False)
        assert reply.status_code == 200, reply.text
        result = reply.json()
        assert result["reward"] == 1.0 and result["called_tool"] is True
        output = result["response"]["output"]
        assert [o["type"] for o in output] == ["function_call", "function_call_output", "message"]
        assert output[2]["generation_token_ids"] and output[2]["prompt_token_ids"]
