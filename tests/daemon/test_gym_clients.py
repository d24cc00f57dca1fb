"""NeMo Gym's own clients, from the ``nemo-gym`` wheel of each release line, against ``gym-runtime up``
running that release's real trees, unchanged (``tests/helpers/gym_package.py``): 0.4.0 with its
pins (``GYM_RUNTIME_PIN_NEMO_GYM=0.4.0``), and 0.7.0 with the default pins, whose example config
adds an environment server (Gym's own ``environment_servers/legacy_agent``) in front of the agent.
The stub model is the policy.

Every head-server endpoint a Gym client calls has a test here, run with the client itself (a venv
of that release built with real uv on a pyenv Python it accepts, cached between runs):

- ``GET /server_instances``: ``ng_status`` / ``gym env status`` (``nemo_gym/server_status.py``) read
  ``process_name``, ``server_type``, ``name``, ``start_time``... and then probe each ``url``;
- ``GET /global_config_dict_yaml``: ``ng_collect_rollouts`` / ``gym eval run --no-serve``
  (``ServerClient.load_from_global_config``, then ``POST /run`` and ``/aggregate_metrics``: on the
  agent under 0.4.0; under 0.7.0 on the environment server that fronts it, which is how 0.7.0's
  ``nemo_gym/rollout_collection.py`` reaches every agent).

Under 0.7.0 the environment server's block also carries a ``placement:`` block given as an
override: Gym's relay refuses unknown keys (``extra="forbid"``), so it starts only because the
runtime keeps its own keys out of every block a server reads (docs/architecture.md §7.1).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

import pytest

from tests.helpers.daemon import kill_tree, read_ready_line, up_process
from tests.helpers.gym_package import assemble_gym_package, cache_dir, gym_venv, gym_wheel, release_python, run_gym_cli

pytestmark = [pytest.mark.pypi, pytest.mark.slow]
AGENT = "example_single_tool_call_simple_agent"
RELAY = "example_single_tool_call_environment_server"
SERVERS = {
    "policy_model": "responses_api_models/vllm_model",
    "example_single_tool_call": "resources_servers/example_single_tool_call",
    AGENT: "responses_api_agents/simple_agent",
}
# the pins of each release as the operator gives them; 0.7.0's are the runtime's defaults
PINS = {"0.4.0": {"GYM_RUNTIME_PIN_NEMO_GYM": "0.4.0", "GYM_RUNTIME_PIN_OPENAI": "2.7.2"}, "0.7.0": {}}


@dataclass(frozen=True)
class Running:
    """A daemon running release ``version``'s package: its head address, the Gym clients' ``bin``,
    the server instances Gym should list (instance -> ``type/implementation``) and the rows."""

    version: str
    head: SplitResult
    gym_bin: Path
    servers: dict[str, str]
    rows: list[dict]


@pytest.fixture(scope="module", params=sorted(PINS))
def running(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    version = request.param
    python = release_python(version)
    if python is None:
        pytest.skip(f"no Python that nemo-gym {version} accepts (for 0.5 and later: run .ci/provision-python)")
    venv = gym_venv(version)
    tmp = tmp_path_factory.mktemp(f"gym-clients-{version}")
    pkg, rows = assemble_gym_package(gym_wheel(python, version), tmp / "pkg")
    servers = dict(SERVERS)
    extra: tuple[str, ...] = ()
    if (pkg / "environment_servers").is_dir():
        servers[RELAY] = "environment_servers/legacy_agent"
        extra = (f"{RELAY}.environment_servers.legacy_agent.placement.num_cpus=1",)
    env = {**PINS[version], "GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs")}
    proc = up_process(pkg, tmp, *extra, "--python", python, env=env)
    try:
        head = urlsplit(json.loads(read_ready_line(proc, timeout=1500))["head_server"])
        yield Running(version, head, venv / "bin", servers, rows)
    finally:
        kill_tree(proc)


def gym(r: Running, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    """Run a Gym CLI pointed at our head server (its Hydra output dir lands in ``cwd``)."""
    return run_gym_cli(r.gym_bin, r.head.geturl(), cwd, *argv)


@pytest.mark.parametrize("tool", [("ng_status",), ("gym", "env", "status")], ids=["ng_status", "gym-env-status"])
def test_gyms_status_lists_every_server_instance_healthy(
    running: Running, tool: tuple[str, ...], tmp_path: Path
) -> None:
    done = gym(running, tmp_path, *tool)
    assert done.returncode == 0, done.stdout + done.stderr
    listed = [line for line in done.stdout.splitlines() if line.startswith("[")]
    assert sorted(listed) == sorted(
        f"[{i}] ✓ {name} ({kind})" for i, (name, kind) in enumerate(running.servers.items(), start=1)
    ), done.stdout
    n = len(running.servers)
    assert f"{n} servers found ({n} healthy, 0 unhealthy)" in done.stdout
    assert "stub_model" not in done.stdout and "KeyError" not in done.stderr


@pytest.mark.parametrize(
    "tool",
    [("ng_collect_rollouts",), ("gym", "eval", "run", "--no-serve")],
    ids=["ng_collect_rollouts", "gym-eval-run"],
)
def test_gyms_collector_writes_rows_with_rewards(running: Running, tool: tuple[str, ...], tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in running.rows[:2]))
    done = gym(
        running,
        tmp_path,
        *tool,
        f"+input_jsonl_fpath={rows}",
        f"+output_jsonl_fpath={tmp_path / 'out.jsonl'}",
        f"+agent_name={AGENT}",
        "+num_repeats=2",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(results) == 4 and all(r["reward"] == 1.0 for r in results), [r.get("reward") for r in results]
    assert {r["agent_ref"]["name"] for r in results} == {AGENT}
    for r in results:
        assert [o["type"] for o in r["response"]["output"]] == ["function_call", "function_call_output", "message"]
    if RELAY in running.servers:  # 0.7.0's collector reached the agent through its environment server
        assert {r["_ng_environment_server"] for r in results} == {RELAY}
    metrics = json.loads((tmp_path / "out_aggregate_metrics.json").read_text())
    assert [m["agent_ref"]["name"] for m in metrics] == [AGENT] and "mean/reward" in metrics[0]["key_metrics"]
    assert "Finished rollout collection!" in done.stdout
