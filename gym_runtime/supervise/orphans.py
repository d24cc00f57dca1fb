"""No server process outlives the daemon (docs/architecture.md §7, case C05).

* :class:`Watchdog`: a tiny separate process (:mod:`gym_runtime.supervise.watchdog`) told about
  each server process group; if the daemon dies without saying ``exit`` (SIGKILL), it SIGKILLs
  every group. Needed at isolation ``none``, where a server's helpers are not in a pid namespace
  and ``PR_SET_PDEATHSIG`` reaches only the direct child.
* :func:`reap_orphans`: at the end of a shutdown, SIGKILL whatever is left in our servers' groups
  and reap zombies adopted by this process (when it is a child subreaper).
* Helpers that left their server's group (``setsid``) carry the run's mark in their environment:
  :mod:`gym_runtime.supervise.run_mark`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

SCRIPT = Path(__file__).with_name("watchdog.py")


class Watchdog:
    """Client side: ``Watchdog.start()``; ``watch(pgid)`` / ``forget(pgid)``; ``close()`` on a
    clean stop (the watchdog exits without killing anything). Call from one thread (the loop)."""

    def __init__(self, proc: subprocess.Popen, fd: int) -> None:
        self.proc = proc
        self._fd: int | None = fd

    @classmethod
    def start(cls, mark: str | None = None) -> Watchdog:
        """The watchdog of this daemon; ``mark``: the run's mark (:mod:`gym_runtime.supervise.run_mark`),
        whose processes it kills too once the daemon is gone."""
        r, w = os.pipe()  # both ends non-inheritable: servers never hold the write end
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(SCRIPT), str(os.getpid()), *([mark] if mark else [])],
                stdin=r,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                env={},
            )  # nothing of the daemon's environment (its secrets)
        finally:
            os.close(r)
        return cls(proc, w)

    def _send(self, line: str) -> None:
        if self._fd is not None:
            try:
                os.write(self._fd, line.encode() + b"\n")
            except OSError:
                pass

    def watch(self, pgid: int) -> None:
        self._send(f"+{pgid}")

    def forget(self, pgid: int) -> None:
        self._send(f"-{pgid}")

    def close(self) -> None:
        """Clean stop: tell the watchdog to exit without killing, and reap it."""
        self._send("exit")
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def group_empty(pgid: int) -> bool:
    """True when no process is left in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


async def reap_orphans(pgids: set[int], timeout_s: float = 1.0) -> None:
    """SIGKILL what is left in our servers' process groups ``pgids`` (e.g. a helper whose server
    was killed, case C05) and reap zombies this process adopted as a child subreaper.

    Only children no ``subprocess.Popen`` or ``asyncio`` subprocess of ours waits for are reaped,
    so their exit codes stay.
    """
    for pgid in pgids:
        if not group_empty(pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
    deadline = time.monotonic() + timeout_s
    while True:
        stray = []
        for k in _adopted(pgids):
            try:
                if k.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(k.pid, os.WNOHANG)
                elif os.getpgid(k.pid) in pgids:
                    k.kill()
                    stray.append(k)
            except (psutil.Error, OSError):
                pass
        if not stray or time.monotonic() >= deadline:
            return
        await asyncio.sleep(0.02)


def _to_judge(k: psutil.Process, pgids: set[int]) -> bool:
    """Whether child ``k`` is one :func:`reap_orphans` acts on, if no handle of ours tracks it: a
    zombie, or a process of one of the servers' groups ``pgids``."""
    try:
        return k.status() == psutil.STATUS_ZOMBIE or os.getpgid(k.pid) in pgids
    except (psutil.Error, OSError):
        return False


def _adopted(pgids: set[int]) -> list[psutil.Process]:
    """Children of this process that are zombies or in ``pgids`` and that no live
    ``subprocess.Popen`` or ``asyncio`` subprocess of ours tracks (orphans adopted when the daemon
    is a child subreaper). An ``asyncio`` subprocess under uvloop is no ``Popen``; reaping its
    zombie here would take its exit from the loop, and its ``wait()`` would never return. The
    tracked handles are found by a walk over every object of the heap (``gc.get_objects``: ~0.1 s
    in a daemon of a 22-server environment), made only when some child is to be judged: at a
    clean stop none is (the sandboxes' own processes are the only children left)."""
    import gc

    try:
        kids = [k for k in psutil.Process().children() if _to_judge(k, pgids)]
    except psutil.Error:
        return []
    if not kids:
        return []
    tracked = {
        o.pid
        for o in gc.get_objects()
        if isinstance(o, (subprocess.Popen, asyncio.subprocess.Process)) and o.returncode is None
    }
    return [k for k in kids if k.pid not in tracked]
