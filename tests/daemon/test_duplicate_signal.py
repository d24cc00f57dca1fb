"""One Ctrl-C under `uv run` arrives twice within milliseconds (the terminal signals the process group
and uv forwards it): that is one stop request with the grace period, not a "second signal" that
kills at once (bug). A second signal later than that still kills at once (test_cases.py, C05)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.helpers.daemon import kill_tree, read_ready_line, simple_env, up_process


def test_the_same_sigint_delivered_twice_is_one_graceful_stop(tmp_path: Path) -> None:
    proc = up_process(simple_env(tmp_path / "pkg"), tmp_path)
    try:
        read_ready_line(proc)
        os.kill(proc.pid, signal.SIGINT)
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, err
    assert err.count("SIGINT: stopping") == 1 and "second signal" not in err
