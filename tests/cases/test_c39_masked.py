"""Case C39 (group G, described in words): Gym 0.7's ``mask_sample`` / ``failure_kind`` answers are
not real zeros. A resources server whose judge is down answers ``/verify`` with ``{"reward": 0.0,
"mask_sample": true, "failure_kind": "judge_failed", "failure_reason": "judge 503"}`` (NeMo Gym
0.7.0 ``judge_failsafe``); ``dry-run --samples 4`` keeps those samples out of the mean, the spread
and the "no GRPO signal" verdict, counts them per row (``masked``) and by ``failure_kind`` in the
summary, reports a row whose every sample is masked as an environment failure (exit 3), and keeps
the fields in each ``--out`` line. The test builds the package: a stdlib agent that answers as
that resources server's verify does, masking the rows that say so, and every other sample of a
mixed row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers.daemon import FIXTURE_APP, write_fixture_package

MASKED = '{"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed", "failure_reason": "judge 503"}'
# the fixture agent's /run: masked when the row says "judge": "down", or on every odd call for "judge": "flaky"
AGENT_APP = FIXTURE_APP.replace(
    '        self._send(200, {"reward": row.get("fixture_reward", 1.0), "instance": name, "row": row})',
    '        CALLS[row.get("judge")] = CALLS.get(row.get("judge"), 0) + 1\n'
    '        if row.get("judge") == "down" or (row.get("judge") == "flaky" and CALLS["flaky"] % 2):\n'
    f"            return self._send(200, {MASKED})\n"
    '        self._send(200, {"reward": float(CALLS[row.get("judge")] % 4 == 0), "instance": name})',
).replace("class H(JSONHandler):", "CALLS = {}\n\nclass H(JSONHandler):")


def test_c39_masked_samples_are_kept_out_of_the_spread_and_an_all_masked_row_fails(tmp_path: Path) -> None:
    assert "CALLS[" in AGENT_APP and MASKED in AGENT_APP
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {
            "acme_judge": {"resources_servers": {"acme_judge": {"domain": "math"}}},
            "acme_agent": {
                "responses_api_agents": {
                    "acme_agent": {"resources_server": {"type": "resources_servers", "name": "acme_judge"}}
                }
            },
        },
        apps={"acme_agent": AGENT_APP},
    )
    ref = {"type": "responses_api_agents", "name": "acme_agent"}
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"responses_create_params": {"input": "2+2?"}, "agent_ref": ref, "judge": judge}) + "\n"
            for judge in ("down", "flaky")
        )
    )
    out = tmp_path / "out.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gym_runtime.cli.main",
            "dry-run",
            str(pkg),
            "--dataset",
            str(rows),
            "--samples",
            "4",
            "--max-concurrent-rollouts",
            "1",
            "--json",
            "--out",
            str(out),
            "--work-dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 3, done.stderr
    assert "1 row(s) had every sample masked by the environment (judge_failed: 6)" in " ".join(done.stderr.split())
    report = json.loads(done.stdout)
    down, flaky = report["rows"]
    assert (down["masked"], down["failures"], down["rewards"], down["mean"], down["flag"]) == (
        4,
        0,
        [],
        None,
        "all masked",
    )
    assert (flaky["masked"], flaky["rewards"], flaky["flag"]) == (2, [0.0, 1.0], None)  # the two measured samples
    assert flaky["signal"] is True and flaky["mean"] == 0.5
    summary = report["summary"]
    assert (summary["masked"], summary["masked_rows"], summary["masked_by_kind"]) == (6, 1, {"judge_failed": 6})
    assert (summary["succeeded"], summary["failures"], summary["reward_mean"]) == (8, 0, 0.5)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    masked = [x for x in lines if x["mask_sample"]]
    assert len(masked) == 6 and all(
        x["failure_kind"] == "judge_failed"
        and x["failure_reason"] == "judge 503"
        and x["reward"] == 0.0
        and x["error"] is None
        for x in masked
    )
