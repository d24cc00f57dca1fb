"""Real input: a NeMo Gym 0.4.0 environment from the PyPI wheel, unchanged, run by
``gym-runtime up`` with the stub model as policy; ``/rollouts/run`` returns rewards.

The three Gym servers call ``ray.init`` at start-up, so the daemon starts ONE private Ray head
(from the servers' venv) and passes its address in ``NEMO_GYM_CONFIG_DICT``; SIGTERM leaves no
process and no Ray directory behind. The job's API key reaches Gym's ``vllm_model`` alone (its
config says ``api_key: ${policy_api_key}``): the stub model requires it, and no other process of
the environment holds it. Venvs are kept in the test cache between runs (the first run builds them
from PyPI, about a minute here).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from tests.helpers.daemon import cmdline, descendants, kill_tree, read_ready_line, up_process, wait_gone
from tests.helpers.gym_package import assemble_gym_package, cache_dir, gym_wheel, python_312_plus

pytestmark = [pytest.mark.pypi, pytest.mark.slow]
AGENT = "example_single_tool_call_simple_agent"


def gym_env(tmp: Path) -> dict[str, str]:
    """Variables of a run against the real package: Gym's pin, its openai bound, shared venvs."""
    return {
        "GYM_RUNTIME_PIN_NEMO_GYM": "0.4.0",
        "GYM_RUNTIME_PIN_OPENAI": "2.7.2",
        "GYM_RUNTIME_PIN_MODE": "gym",
        "GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs"),
        "GYM_RUNTIME_HOME": str(tmp / "home"),
    }


@pytest.fixture(scope="module")
def gym_package(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict], str]:
    python = python_312_plus()
    if python is None:
        pytest.skip("no Python >= 3.12 under pyenv (nemo-gym 0.4.0 requires it)")
    root, rows = assemble_gym_package(gym_wheel(python), tmp_path_factory.mktemp("gym") / "pkg")
    return root, rows, python


def test_real_gym_environment_returns_rewards(gym_package, tmp_path: Path) -> None:
    pkg, rows, python = gym_package
    key = "sk-" + secrets.token_hex(12)
    proc = up_process(pkg, tmp_path, "--python", python, env={**gym_env(tmp_path), "GYM_RUNTIME_POLICY_API_KEY": key})
    try:
        info = json.loads(read_ready_line(proc, timeout=900))
        assert set(info["servers"]) == {"policy_model", "example_single_tool_call", AGENT}
        assert info["ray"]["mode"] == "local" and info["policy_model"]["stub"] is True
        tree = descendants(proc.pid)
        gcs = [p for p in tree if "gcs_server" in p.name()]
        assert len(gcs) == 1  # ONE cluster for three Ray-using servers
        text = httpx.get(info["head_server"] + "/global_config_dict_yaml", trust_env=False).json()
        seen = yaml.safe_load(text)
        assert seen["ray_head_node_address"].startswith("127.0.0.1:") and key not in text
        # no other process started with the key (a server forked from a preloaded parent gets it
        # after the fork, so it is in no process's initial environment; the stub model refuses a
        # request without it, so the rewards below show the model server has it)
        assert holders_of(key, tree) <= {"stub_model", "responses_api_models/vllm_model"}

        ref = {"type": "responses_api_agents", "name": AGENT}
        r = httpx.post(
            info["head_server"] + "/rollouts/run",
            json={"examples": [{**row, "agent_ref": ref} for row in rows[:2]]},
            timeout=300,
            trust_env=False,
        )
        results = json.loads(r.text)["results"]
        for res in results:
            assert "error" not in res, res
            assert res["reward"] == 1.0
            assert [o["type"] for o in res["response"]["output"]] == [
                "function_call",
                "function_call_output",
                "message",
            ]
        ray_dirs = {a for p in tree for a in cmdline(p) if a.startswith("/tmp/gr-ray-")}
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0
        assert wait_gone([p.pid for p in tree], 5.0) == []
        assert ray_dirs and not any(Path(d).exists() for d in ray_dirs)
    finally:
        kill_tree(proc)


def holders_of(key: str, tree: list[psutil.Process]) -> set[str]:
    """Which processes of the environment hold ``key`` in their environment: the stub model (the
    upstream) and the processes running in a server directory (``type/implementation``)."""
    out = set()
    for p in tree:
        try:
            if not any(key in v for v in p.environ().values()):
                continue
            out.add("stub_model" if "gym_runtime.stub_model" in p.cmdline() else "/".join(Path(p.cwd()).parts[-2:]))
        except psutil.Error:
            continue
    return out
