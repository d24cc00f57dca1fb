"""Case C39 (cases README, group G): Gym 0.7.0's ``mask_sample`` / ``failure_kind`` rewards (a
resources server's ``judge_failsafe`` answering ``reward: 0.0, mask_sample: true, failure_kind:
"judge_failed"`` when its judge fails) were counted as real zeros. Inputs built here: a package
whose resources server (``tests/cases/apps/masked_resources.py``) masks the samples each row's
``plan`` says, the built-in agent and stub model, ``dry-run --samples 4``.

Expected: masked samples are kept out of mean, spread and the "no GRPO signal" verdict and
counted per row (``masked``), ``failure_kind`` grouped in the summary; a row whose samples are all
masked is an environment failure, not "no signal"; ``/rollouts/run`` passes the fields through.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.examples.conftest import dry_run
from tests.helpers.environments import mixed_env, row_for, running_up, shared_venvs, stop_cleanly
from tests.helpers.load import run_batch
from tests.helpers.trust import APPS, dry, write_rows

pytestmark = pytest.mark.pypi
MASKED = {"mask_sample": True, "failure_kind": "judge_failed", "failure_reason": "judge 503"}


def package(tmp: Path) -> Path:
    return mixed_env(tmp / "pkg", {"judged": (APPS / "masked_resources.py", {})})


ROWS = [row_for("judged_agent", task_idx=0, plan=["mask"]),  # every sample masked: an environment failure
        row_for("judged_agent", task_idx=1, plan=["mask", 1.0, 1.0, 0.0])]  # one masked, three real rewards


def test_c39_masked_samples_are_counted_apart_an_all_masked_row_is_an_environment_failure_and_rollouts_run_keeps_them(
        tmp_path: Path) -> None:
    pkg = package(tmp_path)
    run, results = dry(tmp_path, ROWS, pkg=pkg, samples=4, env=shared_venvs())
    assert run.code == 3, run.stderr
    all_masked, mixed = run.json()["rows"]
    assert (all_masked["masked"], all_masked["failures"], all_masked["mean"], all_masked["signal"]) == (4, 0, None, None)
    assert all_masked["flag"] == "environment failure" and all_masked["failure_kinds"] == {"judge_failed": 4}
    assert (mixed["masked"], sorted(mixed["rewards"]), mixed["signal"], mixed["flag"]) == (1, [0.0, 1.0, 1.0], True, None)
    assert mixed["mean"] == pytest.approx(2 / 3)
    summary = run.json()["summary"]
    assert (summary["masked"], summary["masked_by_kind"], summary["environment_failure_rows"]) == (
        5, {"judge_failed": 5}, 1)
    assert summary["no_signal_rows"] == 0 and summary["failures"] == 0
    assert "error[GR-ROLLOUT-MASKED]" in run.stderr and "1 row(s) had every sample masked" in run.stderr
    assert sum(r["masked"] for r in results) == 5 and {r["failure_reason"] for r in results if r["masked"]} == {
        "judge 503"}
    table = dry_run(pkg, write_rows(tmp_path, ROWS, "table.jsonl"), "--samples", "4", env=shared_venvs(), timeout=400)
    text = " ".join(table.stdout.split())
    assert "environment failure: all masked (judge_failed)" in text and "5 sample(s) masked" in text
    assert "no GRPO signal" not in text
    # and /rollouts/run of a running environment passes the fields through unchanged
    with running_up(pkg, tmp_path / "up", env=shared_venvs()) as (proc, info):
        [result] = run_batch(info["head_server"], ROWS[:1]).results
        code, err = stop_cleanly(proc)
    assert {k: result[k] for k in MASKED} == MASKED and result["reward"] == 0.0
    assert code == 0, err
