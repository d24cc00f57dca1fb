"""A started server process: pids, exit notification, graceful stop, memory of the whole tree."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from dataclasses import dataclass

import psutil

from .limits import CgroupSlot, ResourceLimits


@dataclass(frozen=True)
class ExitInfo:
    """How a process ended. ``reason``: ``exited`` (returned by itself), ``terminated`` (our TERM),
    ``killed`` (our KILL after the grace), ``memory-limit`` / ``pids-limit`` (stopped for going over
    its limit), ``signal`` (killed by a signal we did not send). ``returncode`` as Popen reports it
    for the outer process (bubblewrap passes the app's exit code through; a signal N becomes 128+N)."""

    returncode: int | None
    reason: str
    detail: str = ""


class SandboxedProcess:
    """Handle for one sandboxed server.

    ``pid``: the outer process (bubblewrap at full, the app itself otherwise). ``pidfd``: an fd
    that becomes readable when the outer process exits (``loop.add_reader(proc.pidfd, cb)`` or
    ``await proc.wait()``); None where pidfd_open is unavailable. ``name``, ``limits``, ``level``.
    """

    def __init__(self, name: str, popen: subprocess.Popen, limits: ResourceLimits, cgroup: CgroupSlot | None,
                 bwrapped: bool) -> None:
        self.name = name
        self.popen = popen
        self.pid = popen.pid
        self.limits = limits
        self.cgroup = cgroup
        self.bwrapped = bwrapped
        self.started_at = time.monotonic()
        self._reason: str | None = None
        self._detail = ""
        try:
            self.pidfd: int | None = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self.pidfd = None
        try:
            self._ps = psutil.Process(self.pid)
        except psutil.Error:
            self._ps = None

    # --- state -------------------------------------------------------------------------------
    @property
    def returncode(self) -> int | None:
        """Exit code once reaped (see :meth:`poll`), else None."""
        return self.popen.returncode

    def poll(self) -> int | None:
        """Reap if exited; the return code or None."""
        rc = self.popen.poll()
        if rc is not None:
            self._close_pidfd()
        return rc

    def exit_info(self) -> ExitInfo | None:
        """How it ended (None while running). Kernel cgroup OOM kills count as ``memory-limit``."""
        rc = self.poll()
        if rc is None:
            return None
        reason = self._reason
        if reason is None and self.cgroup is not None:
            if self.cgroup.oom_killed():
                reason, self._detail = "memory-limit", f"cgroup memory limit {self.limits.memory_mb} MB"
        if reason is None:
            reason = "signal" if rc < 0 or rc > 128 else "exited"
        return ExitInfo(rc, reason, self._detail)

    def mark(self, reason: str, detail: str = "") -> None:
        """Record why we are about to stop it (e.g. ``memory-limit``); the first mark wins."""
        if self._reason is None:
            self._reason, self._detail = reason, detail

    # --- processes ---------------------------------------------------------------------------
    def tree(self) -> list[psutil.Process]:
        """The outer process and all its descendants (empty once gone)."""
        if self._ps is None:
            return []
        try:
            return [self._ps, *self._ps.children(recursive=True)]
        except psutil.Error:
            return []

    def app_pid(self) -> int | None:
        """Host pid of the real app: below bubblewrap's own processes at full, the outer pid otherwise."""
        if not self.bwrapped:
            return self.pid if self.poll() is None else None
        proc = self._ps
        try:
            while proc is not None and proc.name() == "bwrap":
                kids = proc.children()
                proc = kids[0] if kids else None
        except psutil.Error:
            return None
        return proc.pid if proc is not None else None

    def memory_rss(self) -> int:
        """Sum of RSS over the whole tree, in bytes (psutil; ~10 ms for a uvicorn tree)."""
        total = 0
        for p in self.tree():
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _signal_tree(self, sig: int) -> None:
        app = self.app_pid()
        targets = {p.pid for p in self.tree()}
        if app is not None:
            try:
                if os.getpgid(app) == app:  # the app leads its own group: signal all of it
                    os.killpg(app, sig)
            except OSError:
                pass
        if sig == signal.SIGKILL:
            for pid in targets:  # at full killing the outer bwrap ends the whole pid namespace
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        elif app is not None:
            try:
                os.kill(app, sig)
            except OSError:
                pass

    def kill_now(self) -> None:
        """SIGKILL the whole tree at once (no grace)."""
        self._signal_tree(signal.SIGKILL)

    async def wait(self) -> int:
        """Wait for exit without busy polling (pidfd readability; 50 ms polling only without pidfd)."""
        loop = asyncio.get_running_loop()
        while (rc := self.poll()) is None:
            if self.pidfd is not None:
                fut = loop.create_future()
                loop.add_reader(self.pidfd, lambda: fut.done() or fut.set_result(None))
                try:
                    await fut
                finally:
                    if self.pidfd is not None:
                        loop.remove_reader(self.pidfd)
            else:
                await asyncio.sleep(0.05)
        return rc

    async def stop(self, grace_s: float = 5.0) -> ExitInfo:
        """TERM the app's process group, wait ``grace_s``, then KILL the tree (whole pid namespace
        at full) and reap. Returns the :class:`ExitInfo` (``terminated`` or ``killed`` unless it
        had already ended or been marked)."""
        if self.poll() is None:
            self.mark("terminated")
            self._signal_tree(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.wait(), grace_s)
            except asyncio.TimeoutError:
                self._reason = "killed" if self._reason == "terminated" else self._reason
                self._signal_tree(signal.SIGKILL)
                await self.wait()
        leftovers = [p for p in self.tree()[1:] if p.is_running()]
        for p in leftovers:
            try:
                p.kill()
            except psutil.Error:
                pass
        info = self.exit_info()
        assert info is not None
        if self.cgroup is not None:
            self.cgroup.remove()
        return info

    def _close_pidfd(self) -> None:
        if self.pidfd is not None:
            fd, self.pidfd = self.pidfd, None
            try:
                asyncio.get_running_loop().remove_reader(fd)
            except (RuntimeError, ValueError):
                pass
            os.close(fd)
