"""The exit of a server forked by a preloaded parent is the parent's to collect (sandbox/zygote.py
reports it); until that report the server's pidfd is readable while its status is unknown. The
exit watcher used to stay on that readable pidfd and ran on every pass of the loop until the
report came, for each server of a stop at once (sandbox/process.py, ``_check_exit``)."""

from __future__ import annotations

import asyncio
import os

from sandbox.limits import ResourceLimits
from sandbox.process import SandboxedProcess
from sandbox.zygote import ForkedChild


def test_the_watch_ends_at_the_exit_and_the_parents_report_wakes_the_waiter() -> None:
    pid = os.posix_spawn("/bin/true", ["true"], {})  # exits at once; its status is ours to collect, unread
    child = ForkedChild(pid)
    proc = SandboxedProcess("t", child, ResourceLimits(), None, bwrapped=False)  # type: ignore[arg-type]  # as sandbox/core.py's _fork
    child.on_exit = proc.poll
    calls = []
    check = proc._check_exit
    proc._check_exit = lambda: (calls.append(1), check())[1]  # type: ignore[method-assign]

    async def main() -> int:
        waiter = asyncio.ensure_future(proc.wait())
        await asyncio.sleep(0.3)  # the exit happened, the parent has not reported it
        assert not waiter.done()
        asyncio.get_running_loop().call_soon(child.ended, 0)  # the parent's report
        return await asyncio.wait_for(waiter, 5)

    try:
        assert asyncio.run(main()) == 0
    finally:
        os.waitpid(pid, 0)
    assert len(calls) == 1, f"the watcher ran {len(calls)} times"
    assert proc.pidfd is None
