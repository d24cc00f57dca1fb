"""A dry-run leaves its venvs warm: before it stops it lets the daemon finish compiling what its
processes imported, so the author's second run starts with nothing to compile.

Regression: the README's first command stopped right after its rollouts, while 2 of the 7
servers' imports were still being compiled; the second run then compiled them before starting
("that run stopped before compiling them") and only the third run was warm."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.examples.conftest import EXAMPLES, dry_run

pytestmark = pytest.mark.slow

PKG = EXAMPLES / "native-quickstart"
ROWS = EXAMPLES / "native-quickstart.jsonl"


def test_the_second_dry_run_compiles_nothing(tmp_path: Path) -> None:
    env = {"GYM_RUNTIME_HOME": str(tmp_path / "home")}  # new venvs: every process learns its imports
    first = dry_run(PKG, ROWS, "--samples", "1", env=env, timeout=900)
    assert first.code == 0, first.stderr[-3000:]
    learned = [
        ln for ln in first.stderr.splitlines() if "bytecode: compiled what" in ln and "preloaded parent" not in ln
    ]  # its venv's parent: one more
    assert len(learned) == 7, first.stderr[-3000:]  # every server instance, before the stop

    second = dry_run(PKG, ROWS, "--samples", "1", env=env, timeout=900)
    assert second.code == 0, second.stderr[-3000:]
    assert "bytecode:" not in second.stderr, second.stderr[-3000:]
