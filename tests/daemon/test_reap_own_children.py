"""The daemon reaps zombies it adopted as a child subreaper (case C05), never one of its own
children that an event loop still waits for: an ``asyncio`` subprocess under uvloop (the daemon's
loop) is not a ``subprocess.Popen``, and a zombie of it reaped by someone else never reports its
exit, so ``wait()`` hung (seen as a stop whose bytecode compiler step overran, exit 3)."""

from __future__ import annotations

import asyncio
import sys
import time

import uvloop

from gym_runtime.supervise.orphans import reap_orphans


def test_an_event_loop_child_that_exited_keeps_its_exit_code() -> None:
    async def scenario() -> int:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "raise SystemExit(7)")
        time.sleep(0.5)  # blocking on purpose: the child is a zombie the loop has not reaped yet
        await reap_orphans(set(), timeout_s=0.1)
        return await asyncio.wait_for(proc.wait(), 10)

    assert uvloop.run(scenario()) == 7
