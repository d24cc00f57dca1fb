"""``up``'s exit-code rule (its --help): 0 after a requested stop once ready (tests in test_up.py),
130 when stopped before ready, including a Ctrl-C in the middle of a venv build."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers.daemon import interrupt_during_slow_build, slow_build_package, wait_gone


def test_ctrl_c_during_a_venv_build_exits_130(tmp_path: Path) -> None:
    pkg = slow_build_package(tmp_path / "pkg")
    code, out, err, kids = interrupt_during_slow_build(  # a terminal's Ctrl-C
        tmp_path, ["up", str(pkg), "--work-dir", str(tmp_path / "run")], signal.SIGINT
    )
    assert code == 130 and out == "", err
    assert "stopped during start-up (phase: building venvs)" in err and "error[" not in err
    assert wait_gone(kids, 2.0) == []


def test_help_states_the_rule() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "up", "--help"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "0 stopped on request (SIGTERM, SIGINT, or SIGHUP unless started under nohup) after the ready line" in text
    assert "130 stopped by SIGTERM, SIGINT or SIGHUP before the ready line" in text and "cancelled venv build" in text


def test_a_cancelled_build_is_an_interruption() -> None:
    from gym_runtime.errors import BuildError
    from gym_runtime.supervise.interrupted import as_interrupted

    err = as_interrupted(BuildError("venv builds were cancelled", code="GR-BUILD-CANCELLED"), "building venvs")
    assert err.exit_code == 130 and err.code == "GR-START-INTERRUPTED" and "building venvs" in err.message
    other = BuildError("uv failed", code="GR-BUILD-RESOLVE")
    assert as_interrupted(other, "building venvs") is other
