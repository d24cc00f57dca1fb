"""A launcher that read the ready line and went away (its pipes to the daemon closed) can still
stop the daemon: SIGTERM stops every process and the daemon exits 0.

Bug: the SIGTERM handler's progress line ("SIGTERM: stopping") raised ``BrokenPipeError`` on the
closed stderr, so the stop never began and the daemon ignored SIGTERM; and with that fixed, the
interpreter's last flush of the unwritable stream turned the exit code into 120."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.helpers.daemon import descendants, kill_tree, read_ready_line, simple_env, up_process, wait_gone


def test_sigterm_after_the_launcher_closed_its_pipes_stops_everything_and_exits_0(tmp_path: Path) -> None:
    proc = up_process(simple_env(tmp_path / "pkg"), tmp_path)
    try:
        read_ready_line(proc)
        tree = [p.pid for p in descendants(proc.pid)]
        proc.stdout.close()
        proc.stderr.close()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0
        assert wait_gone(tree, 5.0) == []
    finally:
        kill_tree(proc)
