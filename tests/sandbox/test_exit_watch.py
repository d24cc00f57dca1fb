"""A process's exit reaches every waiter, whoever reaps it first.

The stop hang this holds: ``wait()`` used to register a pidfd reader of its own, and ``poll()``
closed that pidfd (cancelling the reader's pending callback) whenever anything else reaped the
process first: the supervisor's own exit watcher, a limit check, a ``/server_instances`` snapshot.
Waiters then slept forever and ``up`` never exited after SIGTERM (1 stop in ~13).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess

from sandbox.limits import ResourceLimits
from sandbox.process import SandboxedProcess


def handle(argv: list[str]) -> SandboxedProcess:
    return SandboxedProcess("t", subprocess.Popen(argv), ResourceLimits(), None, bwrapped=False)


def test_wait_returns_when_another_watcher_reaps_first() -> None:
    async def once() -> int:
        loop = asyncio.get_running_loop()
        proc = handle(["sleep", "30"])
        waiter = asyncio.create_task(proc.wait())
        await asyncio.sleep(0.01)  # the waiter is parked
        fd = os.pidfd_open(proc.pid)  # registered later, so the kernel wakes it first

        def reap_first() -> None:
            loop.remove_reader(fd)
            os.close(fd)
            proc.poll()

        loop.add_reader(fd, reap_first)
        os.kill(proc.pid, signal.SIGKILL)
        return await asyncio.wait_for(waiter, 5)

    for _ in range(10):  # the old code hung on every one of these
        assert asyncio.run(once()) == -signal.SIGKILL


def test_every_waiter_wakes_and_a_poll_in_between_loses_nothing() -> None:
    async def main() -> list[int]:
        proc = handle(["sleep", "30"])
        waiters = [asyncio.create_task(proc.wait()) for _ in range(3)]
        stopper = asyncio.create_task(proc.stop(grace_s=5))
        await asyncio.sleep(0.05)
        asyncio.get_running_loop().call_soon(proc.poll)  # e.g. the limit watcher's once-a-second check
        info = await asyncio.wait_for(stopper, 5)
        assert info.reason == "terminated"
        return await asyncio.wait_for(asyncio.gather(*waiters), 5)

    assert asyncio.run(main()) == [-signal.SIGTERM] * 3


def test_a_second_event_loop_can_wait_after_the_first_one_ended() -> None:
    proc = handle(["sleep", "30"])

    async def give_up() -> None:
        try:
            await asyncio.wait_for(proc.wait(), 0.05)
        except TimeoutError:
            pass

    asyncio.run(give_up())  # its watch belongs to a loop that is now closed

    async def finish() -> int:
        proc.popen.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(proc.wait(), 5)

    assert asyncio.run(finish()) == -signal.SIGTERM
    assert proc.pidfd is None
