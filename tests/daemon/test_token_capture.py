"""Training-token capture end to end (docs/rollouts.md, "Training-token capture"): ``up`` with the
operator's ``GYM_RUNTIME_TOKEN_CAPTURE_DIR`` and the job's ``token_id_capture.enabled=true``; rows
stamped as a trainer stamps them go through ``POST /rollouts/run``; the built-in ``simple_agent``
sends each model call under ``/ng-rollout/<id>/training-token-capture/``, the built-in
``vllm_model`` records it in NeMo Gym's file store, and NeMo Gym 0.7.0's own consumer
(``trajectories_for_rollout``, run in a venv with the ``nemo-gym`` wheel) builds each rollout's
trajectory from what was written: one chain, not masked, the tokens the model server returned.
The policy is the built-in stub model (its generated ids end with the end-of-turn token, as
vLLM's do, so a prompt + generation is the next prompt's prefix). The real engine: tests/vllm/.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.helpers.daemon import descendants
from tests.helpers.environments import running_up, shared_venvs, stop_cleanly
from tests.helpers.gym_package import gym_venv
from tests.helpers.load import run_batch
from tests.helpers.trust import QUICKSTART, example_rows

pytestmark = [pytest.mark.pypi, pytest.mark.slow]
CONTROL = "NEMO_GYM_TOKEN_CAPTURE_CONTROL_TOKEN"

CONSUME = r"""
import json, sys
from pathlib import Path
from nemo_gym.token_id_capture.consumer import trajectories_for_rollout
args = json.loads(sys.argv[1])
out = {}
for rollout_id, response in args["rollouts"].items():
    built = trajectories_for_rollout(rollout_id, [Path(args["dir"])], verified_response=response)
    out[rollout_id] = {"mask_sample": built["mask_sample"], "metrics": built["metrics"], "error": built.get("error"),
                       "output": (built.get("rebuilt_response") or {}).get("output")}
print(json.dumps(out))
"""


def consume(capture: Path, rollouts: dict[str, dict]) -> dict:
    """NeMo Gym 0.7.0's consumer over ``capture`` for each ``{rollout_id: verified response}``."""
    venv = gym_venv("0.7.0")
    if venv is None:
        pytest.skip("NeMo Gym 0.7.0's consumer needs a Python >= 3.13.14 (.ci/provision-python builds one)")
    python = venv / "bin" / "python"
    done = subprocess.run(
        [str(python), "-c", CONSUME, json.dumps({"dir": str(capture), "rollouts": rollouts})],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def capture_env(tmp: Path, capture: Path) -> dict[str, str]:
    return {**shared_venvs(), "GYM_RUNTIME_TOKEN_CAPTURE_DIR": str(capture), CONTROL: "control-secret"}


def _environ(p: psutil.Process) -> dict[str, str]:
    try:
        return p.environ()
    except psutil.Error:
        return {}


def test_gyms_consumer_builds_trajectories_from_what_the_built_in_servers_wrote(tmp_path: Path) -> None:
    capture = tmp_path / "token-capture"
    tool_row, plain_row = example_rows("code_lookup_agent")[0], example_rows("arithmetic_agent")[0]
    rows = [
        {**tool_row, "_ng_task_index": 0, "_ng_rollout_index": 0},
        {**plain_row, "_ng_task_index": 1, "_ng_rollout_index": 0, "_ng_attempt_index": 1},
        {**plain_row},
    ]  # no stamps: stamped on its way through the environment server as Gym's collector does
    with running_up(
        QUICKSTART,
        tmp_path,
        "token_id_capture.enabled=true",
        "token_id_capture.all_agents=true",
        "policy_model.responses_api_models.vllm_model.return_token_id_information=false",
        # each server's own interpreter: the environment a process started with is what
        # /proc shows (a server forked from a preloaded parent gets its variables after the fork)
        env={**capture_env(tmp_path, capture), "GYM_RUNTIME_PRELOAD": "off"},
    ) as (proc, info):
        results = run_batch(info["head_server"], rows).results
        environs = [_environ(p) for p in descendants(proc.pid)]
        passed = {e["NEMO_GYM_CONFIG_PATH"]: e.get(CONTROL) for e in environs if "NEMO_GYM_CONFIG_PATH" in e}
        code, err = stop_cleanly(proc)
    assert code == 0, err[-3000:]
    assert all("error" not in r for r in results), results
    # the control token reaches the model server only, by name from the daemon's environment
    assert passed["policy_model"] == "control-secret" and passed["code_lookup_agent"] is None
    written = sorted(p.name for p in capture.iterdir() if p.suffix == ".jsonl")
    assert written == ["0-0.tokens.jsonl", "1-0-a1.tokens.jsonl", "2-0.tokens.jsonl"]  # row 2, its first sample
    entries = [json.loads(line) for line in (capture / "0-0.tokens.jsonl").read_text().splitlines()]
    assert [e["parent_resolution"] for e in entries] == ["root", "resolved"]
    assert entries[1]["parent_call_id"] == entries[0]["model_call_id"]
    built = consume(capture, {"0-0": results[0]["response"], "1-0-a1": results[1]["response"]})
    tool, plain = built["0-0"], built["1-0-a1"]
    assert tool["mask_sample"] is False and plain["mask_sample"] is False, built
    assert tool["metrics"]["n_calls"] == 2 and tool["metrics"]["chains"] == 1
    assert tool["metrics"]["terminal_attribution"]["method"] == "response_id"
    generated = [i["generation_token_ids"] for i in tool["output"] if i.get("generation_token_ids")]
    assert generated == [e["generation_token_ids"] for e in entries]
    # the model server's answers carry no token ids (return_token_id_information: false): captured all the same
    assert all("generation_token_ids" not in item for item in results[0]["response"]["output"])


def test_capture_without_the_operators_directory_is_refused(monkeypatch, capsys) -> None:
    from gym_runtime.cli.main import main

    monkeypatch.setenv("GYM_RUNTIME_POLICY_API_KEY", "dummy")
    argv = [
        "config",
        str(QUICKSTART),
        "--policy-base-url",
        "http://127.0.0.1:1/v1",
        "--policy-model-name",
        "m",
        "--json",
        "token_id_capture.enabled=true",
    ]
    assert main(argv) == 1
    (violation,) = json.loads(capsys.readouterr().out)["error"]["violations"]
    assert violation["code"] == "GR-CONFIG-TOKEN-CAPTURE-DIR" and violation["key"] == "token_id_capture.enabled"
    assert "GYM_RUNTIME_TOKEN_CAPTURE_DIR" in violation["hint"]
    monkeypatch.setenv("GYM_RUNTIME_TOKEN_CAPTURE_DIR", "relative/dir")
    assert main(argv) == 1
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "GR-SETTINGS-TOKEN-CAPTURE-DIR"
