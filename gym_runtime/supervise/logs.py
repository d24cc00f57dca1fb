"""Per-server logs: a pipe drained continuously by the event loop into a file plus an in-memory tail.

Case C25: a server's stdout and stderr go to one pipe that the loop reads as soon as it is
readable (``loop.add_reader``), so a chatty server never blocks on a full pipe. Every byte goes to
``<logs_dir>/<instance>.log`` (appended across restarts and daemon runs, rotated to ``.log.1``
past ``max_bytes``); the last ``tail_lines`` lines stay in memory for failure reports and the head
server's ``/servers/{name}/logs``. When the file cannot be written (its disk is full) the server
and the daemon go on: the tail still gets every line and says so once, and when the file can be
written again a line there says how many bytes are missing.

The tail is made by :class:`~gym_runtime.supervise.lines.Lines`: a progress bar's ``\r`` redraws
leave only its last state, every line is capped (a cut marker counts what was dropped), and a
partial line never holds more than that cap, so the drain's cost is linear in the bytes a server
writes and its memory bounded whatever it writes (case C51).
"""

from __future__ import annotations

import asyncio
import collections
import os
import time
from pathlib import Path

from gym_runtime.supervise.lines import Lines


class LogSink:
    """One server's log. ``path``: the file; ``tail(n)``: last lines (str, no newline, each at most
    :data:`~gym_runtime.supervise.lines.LINE_MAX_BYTES` bytes of the output plus a cut marker)."""

    def __init__(self, path: Path, tail_lines: int = 40, max_bytes: int = 50 * 1024 * 1024) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._tail: collections.deque[str] = collections.deque(maxlen=max(tail_lines, 200))
        self._lines = Lines()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "ab", buffering=0)  # noqa: SIM115 - lives as long as the sink
        self._fd: int | None = None
        self.bytes_written = 0
        self.lost = 0  # bytes not written since the file last failed (a full disk)
        self.failure: str | None = None

    def note(self, text: str) -> None:
        """A line from the daemon itself (start, exit, restart), marked ``[gym-runtime]``."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        if self._lines.pending() is not None:  # a line under way (a bar) ends before the note
            self._tail.extend(self._lines.end())
            self._write(b"\n", tail=False)
        line = f"[gym-runtime {stamp}] {text}\n"
        self._write(line.encode("utf-8", errors="backslashreplace"))  # a lone surrogate in text never raises

    def open_pipe(self) -> int:
        """A new pipe for the next child: returns the write fd (give it as stdout and stderr, then
        close it in the parent); the read end is drained by :meth:`attach`."""
        self.detach()
        r, w = os.pipe()
        os.set_blocking(r, False)
        self._fd = r
        return w

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start draining the current pipe on ``loop`` (call from the loop's thread)."""
        if self._fd is not None:
            loop.add_reader(self._fd, self._drain)

    def _drain(self) -> None:
        fd = self._fd
        if fd is None:
            return
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:  # EOF: every writer (the child and its helpers) closed it
                self.detach()
                return
            self._write(chunk)

    def drain_now(self) -> None:
        """Read whatever is buffered in the pipe right now (before a failure report)."""
        self._drain()

    def detach(self) -> None:
        """Stop draining and close the read end (flushes a trailing partial line to the tail)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                asyncio.get_running_loop().remove_reader(fd)
            except RuntimeError:
                pass
            os.close(fd)
        self._tail.extend(self._lines.end())

    def _write(self, data: bytes, tail: bool = True) -> None:
        if tail:
            self._tail.extend(self._lines.feed(data))
        if self.failure is not None:  # the file failed before: say what it misses once it takes data again
            note = f"[gym-runtime] {self.lost} bytes of output are missing here: {self.failure}\n".encode()
            if self._put(note) is not None:
                self.lost += len(data)
                return
            self.lost, self.failure = 0, None
        error = self._put(data)
        if error is not None:  # e.g. a full disk: the server and the daemon go on; the tail keeps the lines
            self.failure = f"the log file {self.path} could not be written ({error.strerror or error})"
            self._tail.append(f"[gym-runtime] {self.failure}; its last lines are kept in memory")
            return
        self.bytes_written += len(data)
        if self._file.tell() > self.max_bytes:
            self._rotate()

    def _put(self, data: bytes) -> OSError | None:
        """Write all of ``data`` (a short write, the disk filling mid-way, is followed by the error on
        the rest); the error that stopped it, its unwritten bytes counted in :attr:`lost`."""
        view = memoryview(data)
        try:
            while view:
                view = view[self._file.write(view) or 0 :]
        except OSError as e:
            self.lost += len(view)
            return e
        return None

    def _rotate(self) -> None:
        self._file.close()
        os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - lives as long as the sink

    def tail(self, n: int = 40) -> list[str]:
        """The last ``n`` complete lines (plus the line under way), oldest first."""
        if n <= 0:
            return []
        pending = self._lines.pending()
        lines = list(self._tail)[-n:]
        return lines if pending is None else [*lines, pending][-n:]

    def since_start(self, n: int = 40) -> list[str]:
        """The last ``n`` lines (:meth:`tail`), none from before the daemon's last ``start #``
        note: what the process's latest start wrote, after that note (an error block shows them,
        not what earlier starts of the run logged)."""
        lines = self.tail(n)
        starts = [i for i, line in enumerate(lines) if _start_note(line)]
        return lines[starts[-1] :] if starts else lines

    def last_line(self) -> str | None:
        """The last non-empty line the process itself wrote since the daemon's last ``start #`` note
        (daemon notes skipped), or None when it wrote nothing since."""
        for line in reversed(self.tail(len(self._tail) + 1)):
            if _start_note(line):
                return None
            if line.strip() and not line.startswith("[gym-runtime "):
                return line.strip()
        return None

    def close(self) -> None:
        self.detach()
        self._file.close()


def _start_note(line: str) -> bool:
    """Whether ``line`` is the daemon's ``start #N`` note (:meth:`LogSink.note`)."""
    return line.startswith("[gym-runtime ") and "] start #" in line
