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

HOLD_WAIT_S = 0.2  # how long a KILL waits for a stopped bubblewrap (it stops within a scheduler tick)


@dataclass(frozen=True)
class ExitInfo:
    """How a process ended. ``reason``: ``exited`` (returned by itself), ``terminated`` (our TERM),
    ``killed`` (our KILL after the grace), ``memory-limit`` / ``pids-limit`` (stopped for going over
    its limit), ``signal`` (killed by a signal we did not send), ``stuck`` (still present after our
    KILL, returncode None). ``returncode`` as Popen reports it
    for the outer process (bubblewrap passes the app's exit code through; a signal N becomes 128+N)."""

    returncode: int | None
    reason: str
    detail: str = ""


class SandboxedProcess:
    """Handle for one sandboxed server.

    ``pid``: the outer process (bubblewrap at full, the app itself otherwise). ``await wait()``
    returns when it exits (any number of waiters); ``pidfd`` is the handle's own exit watch (None
    once reaped or where pidfd_open is unavailable): never register it elsewhere, since a second
    watcher that reaps first would leave the others waiting. ``name``, ``limits``, ``level``.
    """

    def __init__(
        self, name: str, popen: subprocess.Popen, limits: ResourceLimits, cgroup: CgroupSlot | None, bwrapped: bool
    ) -> None:
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
        self._exited: asyncio.Future | None = None  # resolved by whoever reaps the process (poll)
        self._reader_loop: asyncio.AbstractEventLoop | None = None  # the loop watching ``pidfd``
        self._ps: psutil.Process | None
        try:
            self._ps = psutil.Process(self.pid)
        except psutil.Error:
            self._ps = None
        self._app: psutil.Process | None = None  # the app below bubblewrap, once found (app_pid)

    # --- state -------------------------------------------------------------------------------
    @property
    def returncode(self) -> int | None:
        """Exit code once reaped (see :meth:`poll`), else None."""
        return self.popen.returncode

    def poll(self) -> int | None:
        """Reap if exited; the return code or None. Whoever reaps first (this call, the exit
        watcher, a limit check) wakes every :meth:`wait`: no waiter can miss the exit."""
        rc = self.popen.poll()
        if rc is not None:
            self._close_pidfd()
            if self._exited is not None and not self._exited.done():
                self._exited.set_result(rc)
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
        """Host pid of the real app: below bubblewrap's own processes at full, the outer pid otherwise.
        Found once and kept while the sandbox runs (``Process.children`` reads every process's
        ``/proc`` entry, and start-up probes ask often)."""
        if not self.bwrapped:
            return self.pid if self.poll() is None else None
        if self._app is not None and self.poll() is None and self._app.is_running():
            return self._app.pid
        proc: psutil.Process | None = self._ps
        try:
            while proc is not None and proc.name() == "bwrap":
                kids = proc.children()
                proc = kids[0] if kids else None
        except psutil.Error:
            return None
        self._app = proc
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

    def _hold_outer(self) -> None:
        """Stop (SIGSTOP) the outer bubblewrap and wait, up to :data:`HOLD_WAIT_S`, until it is
        stopped, so it makes no process between the tree's snapshot and the KILL. Its child
        sets its own parent-death signal only after bubblewrap's ``clone()`` returns
        (``--die-with-parent``): a KILL of bubblewrap in between (milliseconds after a spawn)
        used to leave that child, the sandbox's init, running with its app under pid 1."""
        if not self.bwrapped or self._ps is None:
            return
        try:
            os.kill(self.pid, signal.SIGSTOP)
        except OSError:
            return
        deadline = time.monotonic() + HOLD_WAIT_S
        while time.monotonic() < deadline:
            try:
                if self._ps.status() in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                    return
            except psutil.Error:
                return
            time.sleep(0.001)

    def _signal_tree(self, sig: int) -> None:
        if sig == signal.SIGKILL:
            self._hold_outer()
        app = self.app_pid()
        targets = {p.pid for p in self.tree()} if sig == signal.SIGKILL else set()  # taken before the group signal
        grouped = False
        if app is not None:
            try:
                if os.getpgid(app) == app:  # the app leads its own group: signal all of it
                    os.killpg(app, sig)
                    grouped = True
            except OSError:
                pass
        if sig == signal.SIGKILL:
            for pid in targets:  # at full killing the outer bwrap ends the whole pid namespace
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        elif app is not None and not grouped:  # once: a second TERM lands in the app's own cleanup
            try:
                os.kill(app, sig)
            except OSError:
                pass

    def kill_now(self) -> None:
        """SIGKILL the whole tree at once (no grace)."""
        self._signal_tree(signal.SIGKILL)

    async def wait(self) -> int:
        """Wait for exit without busy polling; returns the exit code. Any number of callers may
        wait at once. One watcher per process (its pidfd's readability; 50 ms polling where
        pidfd_open is unavailable) reaps it, and :meth:`poll` wakes every waiter, so an exit reaped
        by another caller in between is never missed."""
        rc = self.poll()
        if rc is not None:
            return rc
        loop = asyncio.get_running_loop()
        if self._exited is not None and self._exited.get_loop() is not loop:  # an earlier loop's watch
            if self._reader_loop is not None and self.pidfd is not None and not self._reader_loop.is_closed():
                self._reader_loop.remove_reader(self.pidfd)
            self._exited = self._reader_loop = None
        if self._exited is None:
            self._exited = loop.create_future()
            if self.pidfd is not None:
                self._reader_loop = loop
                loop.add_reader(self.pidfd, self._check_exit)
            else:
                loop.call_later(0.05, self._check_exit)
        return await asyncio.shield(self._exited)

    def _check_exit(self) -> None:
        """The exit watcher: reap (``poll`` resolves the waiters) or look again in 50 ms. A readable
        pidfd means the process exited; when its status is still unknown here, it is another
        process's to collect (a server forked by a preloaded parent, whose report calls
        :meth:`poll`, sandbox/zygote.py): the watch ends, since a pidfd stays readable and the loop
        would call this again on every pass until that report came (22 of them spun the daemon's
        loop through a stop)."""
        if self.poll() is not None:
            return
        if self.pidfd is None:
            asyncio.get_running_loop().call_later(0.05, self._check_exit)
        elif self._reader_loop is not None:
            self._reader_loop.remove_reader(self.pidfd)
            self._reader_loop = None

    async def stop(self, grace_s: float = 5.0, kill_wait_s: float = 5.0) -> ExitInfo:
        """TERM the app's process group, wait ``grace_s``, then KILL the tree (whole pid namespace
        at full) and reap. Returns the :class:`ExitInfo` (``terminated`` or ``killed`` unless it
        had already ended or been marked). A process still present ``kill_wait_s`` after the KILL
        (uninterruptible sleep) is not waited for: reason ``stuck``, returncode None. Once the
        process has exited, nothing walks its tree: the kernel moved its children to their
        subreaper when it exited, so none is left below it to find, and a walk reads every entry
        of ``/proc`` (~40 ms on a loaded host, once per server of a stop, on the event loop);
        what left the group is the supervisor's (orphans, the run's mark)."""
        if self.poll() is None:
            self.mark("terminated")
            self._signal_tree(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.wait(), grace_s)
            except TimeoutError:
                self._reason = "killed" if self._reason == "terminated" else self._reason
                self._signal_tree(signal.SIGKILL)
                try:
                    await asyncio.wait_for(self.wait(), kill_wait_s)
                except TimeoutError:
                    state: str
                    try:
                        state = self._ps.status() if self._ps is not None else "unknown"
                    except psutil.Error:
                        state = "gone"
                    return ExitInfo(
                        None,
                        "stuck",
                        f"pid {self.pid} still present {kill_wait_s:g}s after SIGKILL (state {state}); not waited for",
                    )
        info = self.exit_info()
        assert info is not None
        if self.cgroup is not None:
            self.cgroup.remove()
        return info

    def _close_pidfd(self) -> None:
        if self.pidfd is not None:
            fd, self.pidfd = self.pidfd, None
            if self._reader_loop is not None and not self._reader_loop.is_closed():
                self._reader_loop.remove_reader(fd)  # before close: a reused fd number is not ours
            self._reader_loop = None
            os.close(fd)
