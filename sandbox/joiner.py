"""The daemon's end of a task sandbox's joiner (``_joiner.py``): its control socket and the factory that forks it.

A joiner serves one box; :class:`Joiner` sends it requests (one JSON object each, file descriptors
attached) and matches answers by id and command exits by pid. :class:`JoinerFactory` is one
``_joiner.py --factory`` process per daemon that forks a joiner per box: a fork of a small
process instead of a new interpreter (tens to hundreds of milliseconds on a loaded host).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

JOINER = Path(__file__).with_name("_joiner.py")
START_TIMEOUT_S = 20.0
MAX_REQUEST = (1 << 20) - 1  # the joiner's receive buffer (_joiner.py)


class BoxError(RuntimeError):
    """A box could not be made or could not do what it was asked; ``str()`` says why."""


class RequestTooLarge(BoxError):
    """A request that does not fit into one message to the joiner (:data:`MAX_REQUEST` bytes)."""


class JoinerFactory:
    """One ``_joiner.py --factory`` process that forks each box's joiner (a fork instead of a new
    interpreter: create-to-first-exec without ~30-150 ms of interpreter start). Start it with
    ``await JoinerFactory.start(spawner)``; :meth:`close` ends it and every joiner it forked."""

    def __init__(self, proc: subprocess.Popen, ctl: socket.socket) -> None:
        self.proc, self.ctl = proc, ctl
        self._lock = asyncio.Lock()

    @classmethod
    async def start(cls, spawner: concurrent.futures.Executor) -> JoinerFactory:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)

        def spawn() -> subprocess.Popen:
            return subprocess.Popen(
                [sys.executable, "-I", "-S", "-B", str(JOINER), "--factory", str(theirs.fileno()), str(os.getpid())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={},
                start_new_session=True,
            )

        try:
            proc = await asyncio.get_running_loop().run_in_executor(spawner, spawn)
        finally:
            theirs.close()
        ours.setblocking(False)
        return cls(proc, ours)

    async def fork(self, keeper: int, procs: list[str], affinity: list[int] | None, box_ctl: socket.socket) -> int:
        """A joiner for the box whose keeper is ``keeper``, on ``box_ctl``; its pid. Raises BoxError."""
        loop = asyncio.get_running_loop()
        async with self._lock:
            try:
                socket.send_fds(
                    self.ctl,
                    [json.dumps({"keeper": keeper, "cgroups": procs, "affinity": affinity}).encode()],
                    [box_ctl.fileno()],
                )
                reply = await asyncio.wait_for(loop.sock_recv(self.ctl, 4096), START_TIMEOUT_S)
            except (TimeoutError, OSError) as e:
                raise BoxError(f"the joiner factory did not answer ({e!r})") from None
        if not reply:
            raise BoxError("the joiner factory is gone")
        return int(json.loads(reply)["pid"])

    def close(self) -> None:
        self.ctl.close()
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass


class Joiner:
    """The daemon's end of a joiner's control socket: requests by id, exits by pid. ``proc``: its
    Popen when the daemon started it itself, None when a factory forked it (``pid``)."""

    def __init__(self, proc: subprocess.Popen | None, ctl: socket.socket, pid: int | None = None) -> None:
        self.proc, self.ctl = proc, ctl
        self.pid = proc.pid if proc is not None else pid
        self._next = 0
        self._replies: dict[int, asyncio.Future] = {}
        self._exits: dict[int, asyncio.Future] = {}
        self._ready: asyncio.Future = asyncio.get_running_loop().create_future()
        ctl.setblocking(False)
        asyncio.get_running_loop().add_reader(ctl.fileno(), self._readable)

    def _readable(self) -> None:
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.ctl, 1 << 16, 64)
            except BlockingIOError:
                return
            except OSError:
                data, fds = b"", []
            if not data:
                self._gone("the box's joiner ended")
                return
            msg = json.loads(data)
            if "ready" in msg:
                if not self._ready.done():
                    self._ready.set_result(msg)
            elif "exit" in msg:
                fut = self._exits.setdefault(msg["exit"], asyncio.get_running_loop().create_future())
                if not fut.done():
                    fut.set_result(int(msg["status"]))
            else:
                reply = self._replies.pop(msg.get("id"), None)
                if reply is not None and not reply.done():
                    reply.set_result((msg, fds))
                    continue
            for fd in fds:
                os.close(fd)

    def _gone(self, why: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            loop.remove_reader(self.ctl.fileno())
        except (ValueError, OSError):
            pass
        for fut in [self._ready, *self._replies.values(), *self._exits.values()]:
            if not fut.done():
                fut.set_exception(BoxError(why))

    async def ready(self, timeout: float) -> dict:
        return await asyncio.wait_for(asyncio.shield(self._ready), timeout)

    async def request(self, obj: dict, fds: tuple[int, ...] = ()) -> tuple[dict, list[int]]:
        """Send one request; its answer and the fds attached to it. Raises BoxError."""
        self._next += 1
        obj = {**obj, "id": self._next}
        data = json.dumps(obj).encode()
        if len(data) > MAX_REQUEST:  # the joiner reads one message of at most that size
            raise RequestTooLarge(
                f"a request of {len(data)} bytes is over the joiner's {MAX_REQUEST} (command or env too long)"
            )
        fut = self._replies[self._next] = asyncio.get_running_loop().create_future()
        try:
            if fds:
                socket.send_fds(self.ctl, [data], list(fds))
            else:
                self.ctl.send(data)
        except OSError as e:
            self._replies.pop(self._next, None)
            raise BoxError(f"the box's joiner is gone ({e})") from None
        return await fut

    def exit_of(self, pid: int) -> asyncio.Future:
        return self._exits.setdefault(pid, asyncio.get_running_loop().create_future())

    def forget(self, pid: int) -> None:
        self._exits.pop(pid, None)

    def close(self) -> None:
        self._gone("the box was closed")
        self.ctl.close()
        if self.proc is None:  # forked by the factory, which reaps it
            if self.pid is not None:
                with contextlib.suppress(OSError):
                    os.kill(self.pid, signal.SIGKILL)
            return
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
