"""A real NeMo Gym 0.7.0 tree that runs model-written code through the Sandbox API, under
``gym-runtime up`` with no docker, OpenSandbox or other service on the host.

``litmus_agent`` (from the PyPI wheel, unchanged but for its dropped ``datasets``; with its agent,
its environment server and ``vllm_model``) names the ``opensandbox`` provider inline; the start says
that provider cannot be given here and gives it ``gym_runtime``. A row sent to the agent's ``/run``
(as Gym's environment server relays it) whose tool call runs ``print(6*7)`` reaches ``/verify`` with
the sandbox's answer (the stub model reports the tool's output; ``output_regex`` reads it): reward
1.0 only if the code ran. Its image ``python:3.12-slim`` is mapped to the host's read-only root by
the operator's ``GYM_RUNTIME_SANDBOX_IMAGE_MAP``. The sandbox is gone after ``/verify`` and
nothing of it is left after the stop.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx
import pytest

from tests.helpers.daemon import descendants, kill_tree, read_ready_line, up_process, wait_gone
from tests.helpers.gym07 import gym07_python, gym07_wheel
from tests.helpers.gym_package import assemble_tree_package, cache_dir

pytestmark = [pytest.mark.pypi, pytest.mark.slow]

TOOL = {
    "type": "function",
    "name": "stateful_python_code_exec",
    "description": "Run Python code",
    "strict": True,
    "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
}
ROW = {
    "responses_create_params": {
        "input": [{"role": "user", "content": 'Compute six times seven with the tool: "print(6*7)" [stub:p=1]'}],
        "tools": [TOOL],
    },
    "expected_answer": "42",
    "answer_type": "float",
    "output_regex": r"returned: ([0-9.]+)",
    "match": {"rule": "exact"},
    "agent_ref": {"type": "responses_api_agents", "name": "litmus_agent_agent"},
}


def test_litmus_agent_code_runs_in_a_gym_runtime_sandbox(tmp_path: Path) -> None:
    python = gym07_python()
    pkg, _ = assemble_tree_package(gym07_wheel(), "litmus_agent", "litmus_agent.yaml", tmp_path / "pkg")
    env = {
        "GYM_RUNTIME_HOME": str(tmp_path / "home"),
        "GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs07"),
        "OPENSANDBOX_API_KEY": "unused",
        "GYM_RUNTIME_SANDBOX_IMAGE_MAP": "docker.io/library/python:3.12-slim=host",
    }
    proc = up_process(pkg, tmp_path, "--python", python, "--shutdown-grace", "15", env=env)
    try:
        info = json.loads(read_ready_line(proc, timeout=1500))
        head = info["head_server"]
        # straight to the agent's /run, as Gym's environment server relays it
        r = httpx.post(info["servers"]["litmus_agent_agent"] + "/run", json=ROW, timeout=600, trust_env=False)
        assert r.status_code == 200, r.text[:3000]
        res = r.json()
        outputs = [o for o in res["response"]["output"] if o.get("type") == "function_call_output"]
        assert outputs and outputs[0]["output"].strip() == "42", res["response"]["output"]
        assert res["reward"] == 1.0 and res["correct"] is True
        servers = httpx.get(head + "/server_instances", timeout=10, trust_env=False).json()
        assert {s["process_name"]: s.get("sandboxes") for s in servers}["litmus_agent"] == 0  # closed at /verify
        boxes_dir = tmp_path / "run" / "task-sandboxes"
        tree = [p.pid for p in descendants(proc.pid)]
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(60) == 0
        err = proc.stderr.read()
        assert "'opensandbox' cannot be given here" in err and "it gets gym_runtime" in err, err[-3000:]
        assert wait_gone(tree, 10.0) == []
        assert not boxes_dir.exists() or not any(boxes_dir.iterdir())
    finally:
        kill_tree(proc)
