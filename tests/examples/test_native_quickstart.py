"""examples/native-quickstart (native-v1, built-in servers): the README's default dry-run.

Server venvs resolve their requirements from the package index (stage 1), hence ``pypi``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.examples.conftest import EXAMPLES, dry_run, rows_by_line

PKG = EXAMPLES / "native-quickstart"
ROWS = EXAMPLES / "native-quickstart.jsonl"
ZERO_SPREAD_LINE = 6  # the Roman-numeral row: the stub has nothing to compute, so every reward is 0


@pytest.mark.pypi
def test_dry_run_json_flags_the_zero_spread_row(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    run = dry_run(PKG, ROWS, "--json", "--out", str(out))
    assert run.code == 0, run.stderr
    report = run.json()
    assert report["package"] == "native-quickstart" and report["policy_model"]["stub"] is True
    rows = rows_by_line(report)
    assert sorted(rows) == [1, 2, 3, 4, 5, 6]
    flagged = [line for line, r in rows.items() if r["flag"] == "no GRPO signal"]
    assert flagged == [ZERO_SPREAD_LINE]
    zero = rows[ZERO_SPREAD_LINE]
    assert (zero["std"], zero["min"], zero["max"], zero["samples"], zero["failures"]) == (0.0, 0.0, 0.0, 4, 0)
    assert all(r["std"] > 0 and r["signal"] is True for line, r in rows.items() if line != ZERO_SPREAD_LINE)
    summary = report["summary"]
    assert (summary["rows"], summary["rollouts"], summary["failures"], summary["no_signal_rows"]) == (6, 24, 0, 1)
    assert summary["signal_share"] == pytest.approx(5 / 6) and summary["rollouts_per_s"] > 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["row"], r["sample"]) for r in results) == [(i, k) for i in range(6) for k in range(4)]
    assert all(r["error"] is None and r["latency_s"] > 0 for r in results)
    runs = Path(os.environ["GYM_RUNTIME_HOME"]) / "runs"
    assert runs.is_dir() and "unclean stop" not in run.stderr
    assert "warning[" not in run.stderr  # 0.7-shaped: its environment servers are declared, none is generated
    # one stop line: the whole stop, then each step that took 5 ms or more (on a loaded host the rollout
    # batches' step can too); the servers' step names the stub model stopped after them
    (stop,) = [ln for ln in run.stderr.splitlines() if "stop took " in ln]
    assert re.search(
        r"stop took \d+\.\d\ds: (rollout batches \d+\.\d\ds, )?servers \d+\.\d\ds \(server instances "
        r"\d+\.\d\ds, then stub_model \d+\.\d\ds\)",
        stop,
    ), stop


@pytest.mark.pypi
def test_dry_run_table_with_limit_and_samples() -> None:
    run = dry_run(PKG, ROWS, "--samples", "3", "--limit", "2", "--concurrency", "2")
    assert run.code == 0, run.stderr
    assert "native-quickstart · 2 row(s) × 3 sample(s)" in run.stdout
    assert "rows: 2  rollouts: 6  succeeded: 6  failed: 0" in run.stdout
    assert "code_lookup_agent" in run.stdout and "arithmetic_agent" not in run.stdout
    # the runtime's default release needs Python >= 3.13.14, which the built-in servers do not
    assert "no server of this package uses the Gym SDK, so neither it nor that Python is needed" in run.stderr


def test_bad_rows_fail_before_anything_starts(tmp_path: Path) -> None:
    bad = tmp_path / "rows.jsonl"
    good = ROWS.read_text().splitlines()
    bad.write_text("\n".join([good[0], good[1].replace('"code_lookup_agent"', '"code_lookup_agnet"'), "{oops"]) + "\n")
    run = dry_run(PKG, bad, "--json")
    assert run.code == 1
    err = run.json()["error"]
    assert err["code"] == "GR-DATASET"
    where = {(v["file"], v.get("key")) for v in err["violations"]}
    assert where == {(f"{bad}:2", "agent_ref.name"), (f"{bad}:3", None)}
    assert "did you mean 'code_lookup_agent'?" in run.stderr
    assert not (Path(os.environ["GYM_RUNTIME_HOME"]) / "runs").exists(), "nothing may start for bad rows"


def test_usage_errors(tmp_path: Path) -> None:
    run = dry_run(PKG, ROWS, "--samples", "0")
    assert run.code == 2 and "--samples must be at least 1" in run.stderr
    lonely = tmp_path / "pkg"
    lonely.mkdir()
    run = dry_run(lonely, ROWS, "--json")
    assert run.code == 1 and run.json()["error"]["code"] == "GR-PKG-INVALID"


def test_dataset_defaults_to_the_file_beside_the_package(tmp_path: Path) -> None:
    from gym_runtime.cli.dry_run import default_dataset
    from gym_runtime.errors import UsageError

    assert default_dataset(str(PKG)) == ROWS
    with pytest.raises(UsageError, match="no pkg.jsonl next to the package"):
        default_dataset(str(tmp_path / "pkg"))


@pytest.mark.pypi
def test_external_endpoint_and_failed_rollouts_exit_3(tmp_path: Path) -> None:
    from tests.helpers.gym_servers import start_stub

    rows = tmp_path / "rows.jsonl"
    lines = ROWS.read_text().splitlines()
    failing = lines[2].replace("What is 17 * 23?", "[stub:error=500] What is 17 * 23?")
    rows.write_text("\n".join([lines[2], failing]) + "\n")
    out = tmp_path / "out.jsonl"
    with start_stub(tmp_path, "--api-key", "sekret", "--model", "served", "--p-correct", "1.0") as stub:
        run = dry_run(
            PKG,
            rows,
            "--json",
            "--samples",
            "2",
            "--out",
            str(out),
            "--policy-base-url",
            f"{stub.url}/v1",
            "--policy-model-name",
            "served",
            "--policy-api-key-env",
            "STUB_KEY",
            env={"STUB_KEY": "sekret"},
        )
    assert run.code == 3, run.stderr
    report = run.json()
    assert report["policy_model"]["stub"] is False and "sekret" not in run.stdout + run.stderr
    ok, bad = report["rows"]
    assert (ok["mean"], ok["failures"], ok["flag"]) == (1.0, 0, "no GRPO signal")  # p=1: always right
    assert (bad["failures"], bad["mean"], bad["signal"]) == (2, None, None)
    assert set(report["summary"]["failures_by_code"]) == {"GR-ROLLOUT-HTTP"}
    assert "error[GR-ROLLOUT]: 2 of 4 rollouts failed" in run.stderr
    assert len(out.read_text().splitlines()) == 4


@pytest.mark.pypi
def test_dry_run_reports_unknown_tools_context_overflow_and_bad_rewards_per_row(tmp_path: Path) -> None:
    """docs/rollouts.md, "The dry-run report": the quickstart's rows, two of them asking the stub model
    to misbehave (call the grader's ``verify`` route; answer vLLM's prompt-too-long 400). The table
    and --json show, per row, the refused calls (unk), the context-overflow stops (ctx) and the bad
    rewards (bad, none here: the example servers' rewards are all usable)."""
    rows = [json.loads(line) for line in ROWS.read_text().splitlines()[:3]]
    rows[0]["responses_create_params"]["input"][0]["content"] += " [stub:call=verify]"
    rows[2]["responses_create_params"]["input"][0]["content"] += " [stub:overflow=vllm-prompt-length]"
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = dry_run(PKG, dataset, "--samples", "2", "--json")
    assert report.code == 0, report.stderr
    by_line = rows_by_line(report.json())
    assert [by_line[n]["unknown_tool_calls"] for n in (1, 2, 3)] == [2, 0, 0]
    assert [by_line[n]["context_overflows"] for n in (1, 2, 3)] == [0, 0, 2]
    assert [by_line[n]["bad_rewards"] for n in (1, 2, 3)] == [0, 0, 0]
    assert by_line[1]["mean"] == 0.0 and by_line[3]["mean"] == 0.0 and by_line[3]["failures"] == 0
    summary = report.json()["summary"]
    assert (summary["unknown_tool_calls"], summary["context_overflows"], summary["bad_rewards"]) == (2, 2, 0)
    table = dry_run(PKG, dataset, "--samples", "2")
    assert table.code == 0, table.stderr
    lines = table.stdout.splitlines()
    header = next(line for line in lines if " unk " in line).split()
    cells = {int(c[1]): c for c in map(str.split, lines) if len(c) > 10 and c[0].isdigit() and c[1].isdigit()}
    col = {name: header.index(name) for name in ("unk", "ctx", "bad")}
    assert [cells[1][col["unk"]], cells[3][col["ctx"]], cells[1][col["bad"]]] == ["2", "2", "0"]
    assert "tool calls refused: 2" in table.stdout and "2 rollout(s) stopped because the prompt" in table.stdout
