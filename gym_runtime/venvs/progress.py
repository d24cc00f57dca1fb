"""Build progress: rich bars per venv (stage, elapsed) on a TTY, plain lines otherwise, or nothing.

:class:`Reporter` is called from worker threads; implementations are thread-safe.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.progress import TaskID


class Reporter:
    """Silent reporter; the base of the others. ``label`` is the venv's servers, ``stage`` a word."""

    def start(self) -> None: ...

    def stage(self, key: str, label: str, stage: str) -> None: ...

    def done(self, key: str, label: str, status: str, seconds: float) -> None: ...

    def stop(self) -> None: ...


class PlainReporter(Reporter):
    """One line per event: ``[build] acme_math: stage1 ...`` / ``[build] acme_math: built in 3.2s``."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self._lock = threading.Lock()

    def _say(self, text: str) -> None:
        with self._lock:
            print(f"[build] {text}", file=self.stream, flush=True)

    def stage(self, key: str, label: str, stage: str) -> None:
        self._say(f"{label}: {stage} ...")

    def done(self, key: str, label: str, status: str, seconds: float) -> None:
        self._say(f"{label}: {status} ({seconds:.1f}s)")


class RichReporter(Reporter):
    """A rich progress display: one row per venv with its stage and elapsed time."""

    def __init__(self, stream: TextIO | None = None) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.fields[label]}", style="bold", markup=False),
            TextColumn("{task.fields[stage]}", markup=False),
            TimeElapsedColumn(),  # names: text
            console=Console(file=stream or sys.stderr),
            transient=False,
        )
        self._tasks: dict[str, TaskID] = {}
        self._t0: dict[str, float] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        self._progress.start()

    def stage(self, key: str, label: str, stage: str) -> None:
        with self._lock:
            if key not in self._tasks:
                self._tasks[key] = self._progress.add_task("", total=None, label=label, stage=stage)
                self._t0[key] = time.monotonic()
            else:
                self._progress.update(self._tasks[key], stage=stage)

    def done(self, key: str, label: str, status: str, seconds: float) -> None:
        with self._lock:
            if key not in self._tasks:
                self._tasks[key] = self._progress.add_task("", total=1, label=label, stage=status)
            self._progress.update(self._tasks[key], stage=f"{status} ({seconds:.1f}s)", total=1, completed=1)

    def stop(self) -> None:
        self._progress.stop()


def make_reporter(progress: bool | Reporter, stream: TextIO | None = None) -> Reporter:
    """``True``: rich on a TTY, else plain lines; ``False``: silent; or a given reporter."""
    if isinstance(progress, Reporter):
        return progress
    if not progress:
        return Reporter()
    s = stream or sys.stderr
    return RichReporter(s) if s.isatty() else PlainReporter(s)
