"""Interrupted commands exit 130 (README exit codes) and leave nothing behind.

Bugs: a Ctrl-C during `gym-runtime build` exited 3 (GR-BUILD-CANCELLED as a runtime failure), and
SIGTERM killed `gym-runtime dry-run` outright instead of stopping the environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gym_runtime.venvs.store import read_marker
from tests.helpers.daemon import (
    descendants,
    interrupt_during_slow_build,
    kill_tree,
    simple_env,
    slow_build_package,
    wait_gone,
)

ROOT = Path(__file__).resolve().parents[2]


def test_ctrl_c_during_build_exits_130_and_keeps_nothing(tmp_path: Path) -> None:
    pkg = slow_build_package(tmp_path / "pkg")
    code, _, err, kids = interrupt_during_slow_build(tmp_path, ["build", str(pkg)], signal.SIGINT)
    assert code == 130, err
    assert "GR-BUILD-CANCELLED" in err and "Traceback" not in err
    assert wait_gone(kids, 2.0) == []
    venvs = tmp_path / "home" / "venvs"  # finished venvs may stay (they are reused); nothing half-built may
    assert all(read_marker(p) is not None for p in venvs.iterdir() if not p.name.startswith("."))


def test_sigterm_during_dry_run_stops_everything_and_exits_130(tmp_path: Path) -> None:
    pkg = slow_build_package(tmp_path / "pkg")
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        '{"responses_create_params": {"input": "hi"}, "agent_ref": {"type": "responses_api_agents", '
        '"name": "acme_agent"}}\n'
    )
    code, _, err, kids = interrupt_during_slow_build(
        tmp_path, ["dry-run", str(pkg), "--dataset", str(rows), "--work-dir", str(tmp_path / "run")], signal.SIGTERM
    )
    assert code == 130, err
    assert "Traceback" not in err
    assert wait_gone(kids, 2.0) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_while_rollouts_run_stops_everything_and_exits_130(tmp_path: Path, sig: int) -> None:
    """Bug: SIGTERM raised KeyboardInterrupt from a plain signal handler inside the event loop and
    the dry-run hung for good with rollouts in flight. SIGINT, to a dry-run started with SIGINT
    ignored (``cmd &`` in a script does that), did nothing at all (bug): it stops it as SIGTERM does."""
    pkg = simple_env(tmp_path / "pkg")
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        '{"responses_create_params": {"input": "hi"}, "agent_ref": {"type": "responses_api_agents", '
        '"name": "acme_agent"}, "sleep": 60}\n'
    )
    env = {**os.environ, "GYM_RUNTIME_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen(
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
            "--work-dir",
            str(tmp_path / "run"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        lines = []
        deadline = time.monotonic() + 120
        while not any("running 4 rollout(s)" in ln for ln in lines):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            lines.append(proc.stderr.readline())
        time.sleep(0.5)  # the rollouts are in flight (each sleeps 60 s in the agent)
        kids = [p.pid for p in descendants(proc.pid)]
        t0 = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=20)
        took = time.monotonic() - t0
    finally:
        kill_tree(proc)
    assert proc.returncode == 130, err
    assert took < 10 and "Traceback" not in err
    assert wait_gone(kids, 2.0) == []


def test_kill_9_during_build_leaves_no_uv_process(tmp_path: Path) -> None:
    """``kill -9`` of ``gym-runtime build`` and of ``up`` during a build: the uv call (its own process
    group, so no terminal signal reaches it) dies with its builder instead of running on under init."""
    for argv in (["build"], ["up", "--work-dir", str(tmp_path / "run")]):
        home = tmp_path / argv[0]
        pkg = slow_build_package(home / "pkg")
        code, _, _, kids = interrupt_during_slow_build(home, [argv[0], str(pkg), *argv[1:]], signal.SIGKILL)
        assert code == -signal.SIGKILL
        assert kids and wait_gone(kids, 5.0) == [], argv
