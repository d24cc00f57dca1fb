"""One start of ``gym-runtime up`` for ``bench/blend.py``: its process, stderr lines timed from the
launch, and its ready line."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path


class Started:
    """A launched ``up`` (its process, its stderr lines as they come, each also with its seconds
    from the launch) and, once :meth:`wait_ready` returned, its ready line and the seconds to it."""

    def __init__(self, pkg: Path, work: Path, env: dict[str, str], python: str) -> None:
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gym_runtime.cli.main", "up", str(pkg), "--work-dir", str(work), "--python", python],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env=env,
        )
        self.err: list[str] = []
        self.timed: list[tuple[float, str]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.info: dict = {}
        self.ready_s = 0.0

    def _read(self) -> None:
        for ln in self.proc.stderr or ():
            self.err.append(ln)
            self.timed.append((time.monotonic() - self.t0, ln))

    def wait_ready(self) -> str | None:
        """Wait for the ready line; None once it came, else why not (the daemon exited)."""
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        self.ready_s = time.monotonic() - self.t0
        if not line:
            self.proc.wait()
            self.reader.join(5)
            return f"no ready line (exit {self.proc.returncode}): {''.join(self.err[-8:])}"
        self.info = json.loads(line)
        return None
