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


def test_the_heap_is_walked_only_when_a_child_is_to_be_judged(monkeypatch) -> None:
    """The search for handles that still wait on a child (a walk over every object of the heap,
    ~0.1 s in a 22-server daemon) is made only when a child is a zombie or in a server's group:
    at a clean stop none is, and the stop no longer pays for it. A zombie no handle tracks is
    still reaped."""
    import gc
    import os
    import subprocess

    walks: list[int] = []
    real = gc.get_objects
    monkeypatch.setattr(gc, "get_objects", lambda *a: (walks.append(1), real(*a))[1])
    live = subprocess.Popen(["sleep", "30"], start_new_session=True)  # a sandbox's process, in no server group
    try:
        asyncio.run(reap_orphans({999_999_999}, timeout_s=0.1))
        assert walks == []
        orphan = os.posix_spawn("/bin/true", ["true"], {})  # a child no Popen tracks
        deadline = time.monotonic() + 10
        while open(f"/proc/{orphan}/stat").read().split(") ")[1][0] != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        asyncio.run(reap_orphans(set(), timeout_s=0.1))
        assert walks, "a zombie to judge: the handles were looked for"
        assert not os.path.exists(f"/proc/{orphan}"), "the untracked zombie was reaped"
    finally:
        live.kill()
        live.wait()
