"""Case C05, SIGKILL variant, at ``--isolation none`` (no pid namespace to take everything down):
when the daemon is SIGKILLed, neither the server nor the helper child it spawned (which ignores
SIGTERM) may survive. The daemon's watchdog (its own session, so a signal to the daemon's group
does not reach it) kills every server process group once the daemon is gone."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from gym_runtime.supervise.orphans import SCRIPT as WATCHDOG
from tests.helpers.cases import case_package
from tests.helpers.daemon import cmdline, descendants, kill_tree, read_ready_line, up_process, wait_gone


def test_sigkill_of_the_daemon_at_isolation_none_leaves_no_grandchild(tmp_path: Path) -> None:
    cp = case_package("C05", tmp_path / "pkg")
    proc = up_process(cp.root, tmp_path, "--isolation", "none", "stubborn.resources_servers.stubborn.domain=other")
    try:
        read_ready_line(proc)
        tree = descendants(proc.pid)
        helper = [p for p in tree if "sleep(3600)" in " ".join(cmdline(p))]
        assert helper  # the server's own child, in the server's process group
        watchdog = [p for p in tree if cmdline(p)[-3:-1] == [str(WATCHDOG), str(proc.pid)]]  # then the run mark
        assert len(watchdog) == 1 and watchdog[0].pid not in {p.pid for p in helper}
        assert os.getsid(watchdog[0].pid) != os.getsid(proc.pid)  # a signal to the daemon's group misses it
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        assert wait_gone([p.pid for p in tree], 3.0) == []  # server, helper and watchdog
        assert time.monotonic() - t0 < 3
    finally:
        kill_tree(proc)
