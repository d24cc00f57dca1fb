"""``up``'s host-mode flags: misuse is a usage error (exit 2) naming the flag, before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _up(tmp_path: Path, *argv: str, environ: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, **(environ or {})}
    return subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "up", str(tmp_path), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.parametrize(
    "argv,says",
    [
        (["--head-port-range", "5000-5999"], "--head-port-range is for --host-mode only"),
        (["--host-mode", "nmp", "--head-port-range", "5999-5000"], "--head-port-range: '5999-5000' is not a range"),
        (
            ["--host-mode", "nmp", "--heartbeat-interval", "0"],
            "--heartbeat-interval and --rollout-deadline must be > 0",
        ),
        (["--host-mode", "other"], "invalid choice: 'other'"),
    ],
)
def test_misused_host_flags_exit_2(tmp_path: Path, argv: list[str], says: str) -> None:
    done = _up(tmp_path, *argv, environ={"NMP_GYM_GLOBAL_CONFIG": "{}"})
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr
