"""The runtime itself runs on every supported Python (3.11-3.13; training images use 3.13): the
project installed from uv.lock into a fresh env on that interpreter dry-runs the bundled example.
The suite's own interpreter (3.11 here) is covered by every other test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from uv import find_uv_bin

from gym_runtime.errors import GymRuntimeError
from gym_runtime.venvs.pythons import find_python

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.pypi
@pytest.mark.parametrize("version", ["3.12", "3.13"])
def test_dry_run_on_a_runtime_of_each_supported_python(tmp_path: Path, version: str) -> None:
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        pytest.skip("the suite already runs on this Python")
    try:
        python = find_python(version, os.environ)
    except GymRuntimeError:
        pytest.skip(f"no Python {version} on this host")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_PROJECT", "VIRTUAL_ENV", "GYM_RUNTIME_"))}
    env.update(
        UV_PROJECT_ENVIRONMENT=str(tmp_path / "env"),
        UV_PYTHON_DOWNLOADS="never",
        GYM_RUNTIME_HOME=str(tmp_path / "home"),
        COLUMNS="120",
    )
    uv = find_uv_bin()
    subprocess.run(
        [uv, "sync", "--frozen", "--no-dev", "--python", str(python.path)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    run = subprocess.run(
        [
            str(tmp_path / "env" / "bin" / "gym-runtime"),
            "dry-run",
            "examples/native-quickstart",
            "--samples",
            "2",
            "--json",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (
        f"Python {version}"
        in subprocess.run(
            [str(tmp_path / "env" / "bin" / "python"), "--version"], capture_output=True, text=True
        ).stdout
    )
    summary = json.loads(run.stdout)["summary"]
    assert summary["rollouts"] == summary["succeeded"] == 12
