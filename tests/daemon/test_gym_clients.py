"""NeMo Gym's own clients, from the ``nemo-gym`` 0.4.0 wheel, against ``gym-runtime up``.

Every head-server endpoint a Gym client calls has a test here, run with the client itself (a venv
built with real uv on a pyenv Python 3.12+, cached between runs: ``tests/helpers/gym_package.py``):

- ``GET /server_instances``: ``ng_status`` (``nemo_gym/server_status.py``) reads ``process_name``,
  ``server_type``, ``name``, ``start_time``... and then probes each ``url``;
- ``GET /global_config_dict_yaml``: ``ng_collect_rollouts`` (``ServerClient.load_from_global_config``,
  then ``POST /run`` and ``/aggregate_metrics`` on the agents at the hosts and ports it lists).

The environment is the bundled ``examples/native-quickstart`` with the built-in stub model.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.examples.conftest import EXAMPLES
from tests.helpers.daemon import kill_tree, read_ready_line, up_process
from tests.helpers.gym_package import gym_venv

pytestmark = [pytest.mark.pypi, pytest.mark.slow]
INSTANCES = {"policy_model": "responses_api_models/vllm_model", "code_lookup": "resources_servers/example_code_lookup",
             "code_lookup_agent": "responses_api_agents/simple_agent",
             "arithmetic": "resources_servers/example_arithmetic", "arithmetic_agent": "responses_api_agents/simple_agent"}


@pytest.fixture(scope="module")
def gym_bin() -> Path:
    venv = gym_venv()
    if venv is None:
        pytest.skip("no Python >= 3.12 under pyenv (nemo-gym 0.4.0 requires it)")
    return venv / "bin"


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("gym-clients")
    # the clients are nemo-gym 0.4.0's, so the environment runs the 0.4.0 release's contract
    proc = up_process(EXAMPLES / "native-quickstart", tmp, env={"GYM_RUNTIME_PIN_NEMO_GYM": "0.4.0"})
    try:
        yield urlsplit(json.loads(read_ready_line(proc, timeout=600))["head_server"])
    finally:
        kill_tree(proc)


def gym(gym_bin: Path, tool: str, head, cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    """Run a Gym CLI pointed at our head server (its Hydra output dir lands in ``cwd``)."""
    return subprocess.run([str(gym_bin / tool), f"+head_server.host={head.hostname}", f"+head_server.port={head.port}",
                           *overrides], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={"PATH": f"{gym_bin}:/usr/bin:/bin", "HOME": str(cwd), "NO_PROXY": "127.0.0.1"})


def test_ng_status_lists_every_server_instance_healthy(gym_bin: Path, head, tmp_path: Path) -> None:
    done = gym(gym_bin, "ng_status", head, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for i, (instance, kind) in enumerate(INSTANCES.items(), start=1):
        assert f"[{i}] ✓ {instance} ({kind})" in out
    assert "5 servers found (5 healthy, 0 unhealthy)" in out
    assert "stub_model" not in out and "KeyError" not in done.stderr


def test_ng_collect_rollouts_runs_rows_through_our_agents(gym_bin: Path, head, tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join((EXAMPLES / "native-quickstart.jsonl").read_text().splitlines(keepends=True)[:3]))
    done = gym(gym_bin, "ng_collect_rollouts", head, tmp_path, f"+input_jsonl_fpath={rows}",
               f"+output_jsonl_fpath={tmp_path / 'out.jsonl'}", "+num_repeats=2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(results) == 6
    assert sorted({r["agent_ref"]["name"] for r in results}) == ["arithmetic_agent", "code_lookup_agent"]
    for r in results:
        assert isinstance(r["reward"], float) and r["response"]["output"]
        assert (r["unknown_tool_calls"], r["invalid_tool_arguments"], r["context_overflow_stops"]) == (0, 0, 0)
    metrics = json.loads((tmp_path / "out_aggregate_metrics.json").read_text())
    assert sorted(m["agent_ref"]["name"] for m in metrics) == ["arithmetic_agent", "code_lookup_agent"]
    assert all("mean/reward" in m["key_metrics"] and "mean/unknown_tool_calls" in m["key_metrics"] for m in metrics)
    assert "Finished rollout collection!" in done.stdout
