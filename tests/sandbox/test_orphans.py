"""SIGKILL of the daemon leaves no sandboxed process behind (docs/architecture.md §6):
PDEATHSIG on the outer process + bubblewrap's pid namespace with --die-with-parent catch even a
double-forked setsid grandchild."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from sandbox import IsolationLevel

APP = Path(__file__).parent / "apps" / "daemon_like.py"
ROOT = Path(__file__).resolve().parents[2]


def _run_and_kill(tmp_path: Path, level: str, python: Path, wait_s: float = 5) -> tuple[dict, list[psutil.Process], float, list[psutil.Process]]:
    daemon = subprocess.Popen([sys.executable, str(APP), str(tmp_path / "work"), level, str(python)],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        line = daemon.stdout.readline()
        assert line.startswith("READY "), line
        info = json.loads(line[6:])
        victims = psutil.Process(daemon.pid).children(recursive=True)
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()
        t0 = time.monotonic()
        gone, alive = psutil.wait_procs(victims, timeout=wait_s)
        return info, [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], time.monotonic() - t0, victims
    finally:
        if daemon.poll() is None:
            daemon.kill()


def test_sigkill_of_daemon_leaves_nothing(tmp_path, plain_python, full_available):
    if not full_available:
        pytest.skip("full isolation is not available on this host")
    info, alive, _, victims = _run_and_kill(tmp_path, "auto", plain_python)
    assert info["level"] == "full"
    assert len(victims) >= 6  # holder, bwrap x2, forker, its child, the setsid grandchild
    assert alive == [], [(p.pid, p.name()) for p in alive]


def test_level_none_still_reaps_direct_children(tmp_path, plain_python):
    """Without a pid namespace only PDEATHSIG acts: the direct child dies; the warning says so."""
    started = time.time() - 1
    alive: list[psutil.Process] = []
    try:
        info, alive, _, victims = _run_and_kill(tmp_path, IsolationLevel.NONE.value, plain_python, wait_s=1)
        assert info["level"] == "none" and info["warning"].startswith("EGRESS NOT ENFORCED")
        direct = [p for p in victims if p.pid not in {a.pid for a in alive}]
        assert direct, "the PDEATHSIG'd server process must be gone"
    finally:
        _kill_survivors(started, alive)


def _kill_survivors(since: float, known: list[psutil.Process]) -> None:
    """Descendants of a none-level server survive by design: the plain child (``known``, seen in the
    daemon's tree before the kill) and the double-forked grandchild (re-parented to init at once, so
    only its ``forker.py`` command line finds it). Clean up after ourselves."""
    found = [p for p in psutil.process_iter(["cmdline", "create_time"])
             if p.info["create_time"] >= since and any("forker.py" in a for a in p.info["cmdline"] or [])]
    for p in [*known, *found]:
        try:
            p.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
