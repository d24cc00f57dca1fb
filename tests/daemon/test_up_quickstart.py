"""``gym-runtime up examples/native-quickstart``: the built-in FastAPI servers in venvs from PyPI,
the stub model as policy; ready line, rewards through ``/rollouts/run``, SIGTERM leaves nothing."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx
import pytest

from tests.helpers.daemon import descendants, kill_tree, read_ready_line, up_process, wait_gone
from tests.helpers.gym_package import cache_dir

pytestmark = [pytest.mark.pypi, pytest.mark.slow]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_up_native_quickstart(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (EXAMPLES / "native-quickstart.jsonl").read_text().splitlines()]
    proc = up_process(
        EXAMPLES / "native-quickstart", tmp_path, env={"GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs")}
    )
    try:
        info = json.loads(read_ready_line(proc, timeout=600))
        assert set(info["servers"]) == {
            "policy_model",
            "code_lookup",
            "code_lookup_agent",
            "arithmetic",
            "arithmetic_agent",
            "code_lookup_environment_server",
            "arithmetic_environment_server",
        }
        assert info["policy_model"]["stub"] is True and info["ray"]["mode"] == "none"
        r = httpx.post(info["head_server"] + "/rollouts/run", json={"examples": rows}, timeout=120, trust_env=False)
        results = json.loads(r.text)["results"]
        assert len(results) == len(rows) and all("error" not in x for x in results), results
        assert all(x["reward"] in (0.0, 1.0) for x in results) and any(x["reward"] == 1.0 for x in results)
        tree = [p.pid for p in descendants(proc.pid)]
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(15) == 0
        assert wait_gone(tree, 2.0) == []
    finally:
        kill_tree(proc)


def test_training_pod_command_without_an_api_key(tmp_path: Path, stub_endpoint) -> None:
    """The documented training-pod command: a keyless policy endpoint and a model name, no key."""
    url, served = stub_endpoint
    env = {"GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs"), "GYM_RUNTIME_POLICY_API_KEY": ""}
    proc = up_process(
        EXAMPLES / "native-quickstart", tmp_path, "--policy-base-url", url, "--policy-model-name", served, env=env
    )
    try:
        info = json.loads(read_ready_line(proc, timeout=600))
        assert info["policy_model"] == {"base_url": url, "stub": False}
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(15) == 0
        assert "using 'EMPTY'" in proc.stderr.read()
    finally:
        kill_tree(proc)


def test_up_warns_of_a_run_level_agent_routing_it_cannot_use_and_its_rows_say_why(tmp_path: Path) -> None:
    """``up`` starts whatever ``agent_name`` says (a collection setting), says what is wrong with it
    at start, and its ``/rollouts/run`` refuses each row with that reason (docs/rollouts.md)."""
    row = json.loads((EXAMPLES / "native-quickstart.jsonl").read_text().splitlines()[0])
    proc = up_process(
        EXAMPLES / "native-quickstart",
        tmp_path,
        "agent_name=arithmetic_agnet",
        env={"GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs")},
    )
    try:
        info = json.loads(read_ready_line(proc, timeout=600))
        r = httpx.post(info["head_server"] + "/rollouts/run", json={"examples": [row]}, timeout=120, trust_env=False)
        (result,) = json.loads(r.text)["results"]
        assert result["error"]["code"] == "GR-ROLLOUT-AGENT-REF"
        assert result["error"]["message"].startswith(
            "agent_name routes to 'arithmetic_agnet', which is not a configured responses_api_agents instance"
        )
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(15) == 0
        said = proc.stderr.read()
        assert "warning[GR-CONFIG-AGENT-ROUTING] override: agent_name: routes to 'arithmetic_agnet'" in said, said
    finally:
        kill_tree(proc)
