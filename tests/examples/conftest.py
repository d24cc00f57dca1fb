"""Run ``gym-runtime dry-run`` on the bundled examples as a user would: a real subprocess, real uv,
real servers, the built-in stub model. Shared by the per-example tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    def json(self) -> dict:
        return json.loads(self.stdout)


def dry_run(package: Path, dataset: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 600) -> Run:
    """``gym-runtime dry-run PACKAGE --dataset DATASET ARGS`` in a fresh process."""
    argv = [sys.executable, "-m", "gym_runtime.cli.main", "dry-run", str(package), "--dataset", str(dataset), *args]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "100", **(env or {})},
    )
    return Run(done.returncode, done.stdout, done.stderr)


def rows_by_line(report: dict) -> dict[int, dict]:
    return {r["line"]: r for r in report["rows"]}
