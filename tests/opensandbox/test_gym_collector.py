"""NeMo Gym 0.7.0's own collector scores the bundled example's rows through our head server under
the ``opensandbox`` backend (``opensandbox_server``: a real OpenSandbox server on podman), with the
rewards the ``local`` backend gives on the same rows.

``gym-runtime up examples/native-quickstart`` runs once under each backend (one state directory, so
one set of venvs; the built-in stub model as policy, seed 0, fresh per run) and Gym's
``ng_collect_rollouts`` (the 0.7.0 wheel's venv, ``tests/helpers/gym_package.py``) sends every row
of ``examples/native-quickstart.jsonl`` twice: it reads ``/global_config_dict_yaml`` from the head
server and reaches each agent through the environment server in front of it, at the addresses the
config gives (under ``opensandbox``: the daemon's relay of each server, which forwards to its
sandbox). Every rollout must come back scored (a numeric ``reward``, no failure class) and each
row's sorted rewards must equal the ``local`` run's: the stub's answers depend only on its seed,
the prompt and how often that prompt was seen, so the backends see the same answers.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.helpers.daemon import kill_tree, read_ready_line, up_process
from tests.helpers.gym_package import gym_venv, run_gym_cli
from tests.helpers.opensandbox.runs import DATASET, EXAMPLE, daemon_env

pytestmark = [pytest.mark.opensandbox, pytest.mark.pypi, pytest.mark.slow, pytest.mark.timeout(1500)]
RELEASE = "0.7.0"
REPEATS = 2
AGENTS = ["arithmetic_agent", "code_lookup_agent"]


def collect(
    server, home: Path, tmp: Path, backend: str, gym_bin: Path, env: dict[str, str] | None = None
) -> list[dict]:
    """``up`` under ``backend`` (``env``: the daemon's whole environment, default
    :func:`daemon_env`'s), Gym's collector over every row :data:`REPEATS` times, ``stop``; the
    collector's output rows."""
    tmp.mkdir()
    proc = up_process(EXAMPLE, tmp, env=env or daemon_env(server, home, backend))
    try:
        ready = json.loads(read_ready_line(proc, timeout=600))
        assert (ready["isolation"] == "opensandbox") == (backend == "opensandbox")
        out = tmp / "out.jsonl"
        done = run_gym_cli(
            gym_bin,
            ready["head_server"],
            tmp,
            "ng_collect_rollouts",
            f"+input_jsonl_fpath={DATASET}",
            f"+output_jsonl_fpath={out}",
            f"+num_repeats={REPEATS}",
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "Finished rollout collection!" in done.stdout
        metrics = json.loads((tmp / "out_aggregate_metrics.json").read_text())
        assert sorted(m["agent_ref"]["name"] for m in metrics) == AGENTS, metrics
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0, proc.stderr.read()[-3000:]
    finally:
        kill_tree(proc)
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def assert_every_row_scored(results: list[dict]) -> None:
    """Every row of the dataset :data:`REPEATS` times, each with a numeric reward and no failure
    class, through each agent's environment server; the stub right on some rows, wrong on others."""
    rows = [json.loads(line) for line in DATASET.read_text().splitlines() if line.strip()]
    assert len(results) == len(rows) * REPEATS
    for r in results:
        assert isinstance(r.get("reward"), (int, float)) and not r.get("_ng_failure_class"), {
            k: r.get(k) for k in ("task_idx", "reward", "_ng_failure_class", "error")
        }
    assert sorted({r["agent_ref"]["name"] for r in results}) == AGENTS
    # Gym reached each agent through the environment server in front of it, as 0.7.0 does
    assert {r["_ng_environment_server"] for r in results} == {
        f"{a.removesuffix('_agent')}_environment_server" for a in AGENTS
    }
    assert 0 < sum(r["reward"] for r in results) < len(results)


def _rewards_by_row(results: list[dict]) -> dict[int, list[float]]:
    by_row: dict[int, list[float]] = {}
    for r in results:
        by_row.setdefault(r["task_idx"], []).append(r["reward"])
    return {k: sorted(v) for k, v in sorted(by_row.items())}


def test_gyms_collector_scores_every_row_as_under_local(opensandbox_server, tmp_path: Path) -> None:
    venv = gym_venv(RELEASE)
    if venv is None:
        pytest.skip(f"no Python that nemo-gym {RELEASE} accepts (run .ci/provision-python)")
    home = tmp_path / "home"
    local = collect(opensandbox_server, home, tmp_path / "local", "local", venv / "bin")
    remote = collect(opensandbox_server, home, tmp_path / "osb", "opensandbox", venv / "bin")
    assert_every_row_scored(remote)
    assert _rewards_by_row(remote) == _rewards_by_row(local)
    assert opensandbox_server.sandboxes() == []  # the stop deleted every sandbox of the run
