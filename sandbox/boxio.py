"""Process and pipe helpers of a task sandbox (``taskbox.py``): output drains, kills, reaping, removal."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import subprocess
from pathlib import Path

import psutil

from .joiner import BoxError

log = logging.getLogger("sandbox.tasks")
MAX_OUTPUT = 16 << 20  # bytes kept per stream of one exec; the rest is read and dropped


def _read_info(fd: int) -> dict:
    """bubblewrap's ``--info-fd`` JSON (``{}`` when it ended first)."""
    data = b""
    try:
        while chunk := os.read(fd, 4096):
            data += chunk
            try:
                return json.loads(data)
            except ValueError:
                continue
    finally:
        os.close(fd)
    return {}


async def _child_of(pid: int) -> int:
    """The keeper: the one child of the box's init (bubblewrap forks it right after setup)."""
    path = f"/proc/{pid}/task/{pid}/children"
    for _ in range(500):
        try:
            kids = Path(path).read_text().split()
        except OSError:
            kids = []
        if kids:
            return int(kids[0])
        await asyncio.sleep(0.002)
    raise BoxError(f"the box's init (pid {pid}) started no keeper")


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _kill_tree(pid: int) -> None:
    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.Error:
        procs = []
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass


def _reap(popen: subprocess.Popen) -> None:
    try:
        popen.wait(timeout=5)
    except subprocess.TimeoutExpired:
        log.warning("task sandbox keeper pid %s still present 5 s after SIGKILL", popen.pid)


def _remove_tree(base: Path) -> None:
    def unlock(func, path, _exc) -> None:  # overlayfs leaves its work dir mode 000
        try:
            os.chmod(path, 0o700)
            os.chmod(os.path.dirname(path), 0o700)
            func(path)
        except OSError:
            pass

    shutil.rmtree(base, onerror=unlock)


class _Drain:
    """Read a pipe to its end on the event loop, keeping at most :data:`MAX_OUTPUT` bytes."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = bytearray()
        self.truncated = False
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        os.set_blocking(fd, False)
        asyncio.get_running_loop().add_reader(fd, self._read)

    def _read(self) -> None:
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            asyncio.get_running_loop().remove_reader(self.fd)
            if not self.done.done():
                self.done.set_result(None)
            return
        room = MAX_OUTPUT - len(self.buf)
        if len(chunk) > room:
            self.truncated = True
        self.buf += chunk[: max(room, 0)]

    def close(self) -> tuple[bytes, bool]:
        if self.fd >= 0:
            try:
                asyncio.get_running_loop().remove_reader(self.fd)
            except (ValueError, OSError):
                pass
            os.close(self.fd)
            self.fd = -1
        return bytes(self.buf), self.truncated
