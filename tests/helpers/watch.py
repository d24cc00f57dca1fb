"""``gym-runtime dry-run --watch`` on a copy of the bundled example, as a running process to edit under.

:func:`watched_quickstart` copies ``examples/native-quickstart`` and its dataset into a directory
and gives the ``arithmetic`` instance an implementation of its own in the package
(``tests/rollouts/apps/watched_arithmetic.py`` as ``resources_servers/example_arithmetic/app.py``,
a stdlib server whose ``verify()`` rewards ``REWARD``; a comment-only ``requirements.txt``), so
an edit of that file is an edit of a server's tree; :func:`set_requirements` rewrites that
server's ``requirements.txt``, :func:`tiny_wheel` makes a pure-Python distribution for it to ask
for, and :func:`running_venvs` finds the venvs the watch's processes run on. :class:`WatchRun`
starts the watch and reads its stdout (the tables) and stderr (progress lines, error blocks) in
threads, so a test waits for what the process prints, never for a guessed time.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.helpers.daemon import cmdline, descendants, kill_tree
from tests.helpers.wheels import build_wheel

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "tests" / "rollouts" / "apps" / "watched_arithmetic.py"
REWARD_LINE = re.compile(r"^REWARD = .*$", re.M)


def watched_quickstart(root: Path) -> tuple[Path, Path]:
    """The package copy and its dataset under ``root``; returns ``(package, dataset)``."""
    pkg, rows = root / "native-quickstart", root / "native-quickstart.jsonl"
    shutil.copytree(REPO / "examples" / "native-quickstart", pkg)
    shutil.copy(REPO / "examples" / "native-quickstart.jsonl", rows)
    server = pkg / "resources_servers" / "example_arithmetic"
    (server / "app.py").write_text(APP.read_text())
    (server / "requirements.txt").write_text("# stdlib only\n")
    return pkg, rows


def set_reward(pkg: Path, line: str) -> None:
    """Rewrite the ``REWARD = ...`` line of the arithmetic server's app (in place, as an editor saves)."""
    app = pkg / "resources_servers" / "example_arithmetic" / "app.py"
    app.write_text(REWARD_LINE.sub(line, app.read_text(), count=1))


def set_requirements(pkg: Path, text: str) -> None:
    """Rewrite the arithmetic server's ``requirements.txt`` (in place, as an editor saves)."""
    (pkg / "resources_servers" / "example_arithmetic" / "requirements.txt").write_text(text)


TINY = "acme-watch-tiny"  # the distribution tiny_wheel() makes; its module says REWARD


def tiny_wheel(out_dir: Path, reward: float, salt: str, version: str = "0.1.0") -> Path:
    """``acme_watch_tiny-<version>-py3-none-any.whl`` in ``out_dir``: a module setting ``REWARD =
    reward``; ``salt`` (e.g. the test's directory) makes its sha256 new, so no uv cache holds it already."""
    return build_wheel(out_dir, TINY, version, files={"acme_watch_tiny/__init__.py": f"REWARD = {reward}\n# {salt}\n"})


def running_venvs(pid: int) -> set[Path]:
    """The venvs (``<venv>/bin/python``'s ``<venv>``) in the command lines of ``pid``'s descendants."""
    return {Path(a).parents[1] for p in descendants(pid) for a in cmdline(p) if a.endswith("/bin/python")}


def has_module(venv: Path, module: str) -> bool:
    """Whether ``venv`` has ``module`` installed in its site-packages."""
    return any(venv.glob(f"lib/python*/site-packages/{module}/__init__.py"))


class WatchRun:
    """``dry-run PKG --dataset ROWS --watch ARGS`` in its own session; ``env`` added to the caller's;
    ``prefix``: a command the watch's command line is given to (it runs it: ``unshare ...``)."""

    def __init__(
        self,
        pkg: Path,
        rows: Path,
        work: Path,
        *args: str,
        env: dict[str, str] | None = None,
        prefix: list[str] | None = None,
    ) -> None:
        argv = [
            *(prefix or []),
            sys.executable,
            "-m",
            "gym_runtime.cli.main",
            "dry-run",
            str(pkg),
            "--dataset",
            str(rows),
            "--watch",
            "--work-dir",
            str(work),
            *args,
        ]
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._cv = threading.Condition()
        for stream, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    def _pump(self, stream, sink: list[str]) -> None:
        for line in stream:
            with self._cv:
                sink.append(line)
                self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    def _wait(self, sink: list[str], start: int, pattern: str, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for i in range(start, len(sink)):
                    if re.search(pattern, sink[i]):
                        return i
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and len(sink) == start):
                    raise AssertionError(
                        f"no {pattern!r} within {timeout:g}s (exit {self.proc.poll()}):\n"
                        + "".join(self.err[-60:])
                        + "".join(self.out[-40:])
                    )
                start = len(sink)
                self._cv.wait(min(left, 1.0))

    def table(self, run: int, timeout: float = 240) -> list[str]:
        """The lines of run ``run``'s table and summary once all are printed (its last line:
        ``mean reward`` for run 1, ``against run N`` after)."""
        first = self._wait(self.out, 0, rf"· run {run}\b", timeout)
        last = self._wait(self.out, first, r"^against run " if run > 1 else r"^mean reward:", timeout)
        with self._cv:
            return self.out[first : last + 1]

    def stderr_after(self, mark: int, pattern: str, timeout: float = 180) -> int:
        """Index of the first stderr line from ``mark`` on matching ``pattern`` (waits for it)."""
        return self._wait(self.err, mark, pattern, timeout)

    def interrupt(self, timeout: float = 60) -> int:
        """Ctrl-C (SIGINT to the process); its exit code."""
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout)

    def close(self) -> None:
        kill_tree(self.proc)


def rows_of(table: list[str], agent: str) -> list[str]:
    """``table``'s row lines for ``agent`` (its third column), stripped."""
    return [line.strip() for line in table if len(line.split()) > 3 and line.split()[2] == agent]


def mean_of(row: str) -> str:
    """The ``mean`` cell of a row line."""
    return row.split()[4]
