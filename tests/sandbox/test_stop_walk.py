"""A stop walks no process tree once the process has exited (sandbox/process.py): the kernel moved
its children to their subreaper when it exited, so a walk finds none, and each walk reads every
entry of ``/proc`` (~40 ms on a loaded host). At 22 servers the walks, one per server on the event
loop, were most of the daemon's stop (0.9-1.3 s of a 1.6-2.3 s stop)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys

import psutil

from sandbox.limits import ResourceLimits
from sandbox.process import SandboxedProcess

TERM_EXITS = "import signal, sys, time; print('ready', flush=True); time.sleep(60)"


def test_a_stop_after_the_exit_walks_no_process_tree(monkeypatch) -> None:
    walks: list[int] = []
    real = psutil.Process.children
    monkeypatch.setattr(
        psutil.Process, "children", lambda self, *a, **kw: (walks.append(self.pid), real(self, *a, **kw))[1]
    )
    procs = []
    for _ in range(3):
        popen = subprocess.Popen(
            [sys.executable, "-c", TERM_EXITS], stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        assert popen.stdout is not None and popen.stdout.readline().strip() == "ready"
        procs.append(SandboxedProcess("t", popen, ResourceLimits(), None, bwrapped=False))

    async def stop_all() -> list:
        return await asyncio.gather(*(p.stop(grace_s=10) for p in procs))

    infos = asyncio.run(stop_all())
    assert [(i.reason, i.returncode) for i in infos] == [("terminated", -signal.SIGTERM)] * 3
    assert walks == []
