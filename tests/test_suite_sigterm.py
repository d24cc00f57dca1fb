"""A SIGTERM to the suite (a CI job cancelled, ``timeout``) tears down like Ctrl-C: a process a test
started in its own session, as the daemon and stub-model helpers do, is stopped by the test's own
cleanup instead of outliving pytest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.daemon import running

REPO = Path(__file__).resolve().parents[1]

INNER = """
import subprocess, sys, time

def test_holds_a_helper():
    helper = subprocess.Popen(["sleep", "600"], start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        print("HELPER", helper.pid, flush=True)
        time.sleep(600)
    finally:
        helper.kill()
        helper.wait()
"""


def test_sigterm_to_pytest_runs_the_tests_cleanup(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_configure, pytest_unconfigure  # noqa: F401\n"
    )
    (tmp_path / "test_inner.py").write_text(INNER)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_inner.py"),
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    helper = None
    try:
        for line in proc.stdout:
            if "HELPER" in line:
                helper = int(line.split("HELPER", 1)[1].split()[0])
                break
        assert helper is not None and running(helper)
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0]
        assert "KeyboardInterrupt" in out and proc.returncode != 0
        deadline = time.monotonic() + 5
        while running(helper) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(helper), "the helper outlived the SIGTERM'd suite"
    finally:
        proc.kill()
        proc.wait()
        if helper is not None and running(helper):
            os.kill(helper, signal.SIGKILL)
