"""Gym's own example rows, as its wheel ships them (no ``agent_ref``), run by ``gym-runtime dry-run``
on the real ``example_single_tool_call`` trees of each release line with the override Gym's own
collector is given, ``agent_name=<agent>`` (docs/rollouts.md, "Rows that name no agent"). Without
it the rows are a dataset error whose hint names the override; nothing starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.daemon.test_gym_clients import AGENT, PINS
from tests.helpers.gym_package import assemble_gym_package, cache_dir, gym_wheel, release_python

pytestmark = [pytest.mark.pypi, pytest.mark.slow]


def dry_run(pkg: Path, rows: Path, tmp: Path, python: str, version: str, *extra: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        **PINS[version],
        "GYM_RUNTIME_VENV_DIR": str(cache_dir() / "venvs"),
        "GYM_RUNTIME_HOME": str(tmp / "home"),
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gym_runtime.cli.main",
            "dry-run",
            str(pkg),
            *extra,
            "--dataset",
            str(rows),
            "--samples",
            "2",
            "--python",
            python,
            "--work-dir",
            str(tmp / "run"),
            "--out",
            str(tmp / "out.jsonl"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1500,
    )


@pytest.mark.parametrize("version", sorted(PINS))
def test_gyms_example_rows_run_with_agent_name_as_under_gyms_collector(version: str, tmp_path: Path) -> None:
    python = release_python(version)
    if python is None:
        pytest.skip(f"no Python that nemo-gym {version} accepts (for 0.5 and later: run .ci/provision-python)")
    pkg, rows = assemble_gym_package(gym_wheel(python, version), tmp_path / "pkg")
    assert rows and not any("agent_ref" in r for r in rows)  # as the wheel ships them
    data = tmp_path / "example.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows[:3]))

    refused = dry_run(pkg, data, tmp_path, python, version)
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert "GR-DATASET-MISSING-FIELD" in refused.stderr and "agent_name=<agent>" in refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "out.jsonl").exists()

    done = dry_run(pkg, data, tmp_path, python, version, f"agent_name={AGENT}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(results) == 6 and {r["agent"] for r in results} == {AGENT}
    assert [r["reward"] for r in results] == [1.0] * 6, [r.get("error") for r in results]
