"""A start reaps the leftovers of a SIGKILLed run of its own state root by their run mark
(``gym_runtime/supervise/run_mark.py``), and only in its own pid namespace.

Seen: the runtime image's servers, run by ``podman run`` beside a daemon on the host, were all
SIGKILLed a few seconds into their start whenever a daemon started on the host: their mark names
the container's daemon by a pid of the container's namespace, which the host does not have, so the
host's daemon took them for a dead run's leftovers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from gym_runtime.supervise import run_mark

OWNER = "0123456789abcdef"  # this test's own state root (a daemon of another root judges none of its marks)
STALE = f"999999-1-deadbeef0000-{OWNER}"  # names a daemon pid that no process has: a dead run's mark
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def _spawn(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(argv, env={**os.environ, run_mark.VAR: STALE}, start_new_session=True)


def _marked_pid(root: subprocess.Popen, timeout: float = 10.0) -> int:
    """The pid of the process under ``root`` (itself included) holding the stale mark and running python."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for p in [psutil.Process(root.pid), *psutil.Process(root.pid).children(recursive=True)]:
            try:
                if p.environ().get(run_mark.VAR) == STALE and "python" in p.name():
                    return p.pid
            except psutil.Error:
                continue
        time.sleep(0.05)
    raise AssertionError("the marked process did not start")


def test_a_dead_runs_leftover_in_this_namespace_is_killed_one_in_another_is_left_alone() -> None:
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--pid", "--fork", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a pid namespace here: {probe.stderr.decode().strip()}")
    here = _spawn(SLEEP)
    elsewhere = _spawn(["unshare", "--user", "--map-root-user", "--pid", "--fork", *SLEEP])
    try:
        other = _marked_pid(elsewhere)
        assert os.readlink(f"/proc/{other}/ns/pid") != os.readlink("/proc/self/ns/pid")
        killed = run_mark.kill_stale(OWNER)
        assert any(f"pid {here.pid} " in k for k in killed), killed
        here.wait(5)  # already reaped by kill_stale's wait (it is our child): gone is what counts
        assert not psutil.pid_exists(here.pid)
        assert psutil.pid_exists(other) and psutil.Process(other).status() != psutil.STATUS_ZOMBIE
        assert not any(f"pid {other} " in k for k in killed), killed
    finally:
        for p in (here, elsewhere):
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.wait(5)


def test_a_dead_runs_leftover_of_another_state_root_is_left_to_that_root() -> None:
    """A start judges only the marks of its own state root: the suite's daemons, beside a test's
    killed run of another root, used to reap that run's helper before the test's own next start."""
    theirs = subprocess.Popen(
        SLEEP, env={**os.environ, run_mark.VAR: STALE.replace(OWNER, "f" * 16)}, start_new_session=True
    )
    ours = _spawn(SLEEP)
    try:
        _marked_pid(ours)
        killed = run_mark.kill_stale(OWNER)
        assert any(f"pid {ours.pid} " in k for k in killed) and not any(f"pid {theirs.pid} " in k for k in killed)
        assert theirs.poll() is None
        assert run_mark.owner_of("/a") != run_mark.owner_of("/b") and len(run_mark.owner_of("/a")) == 16
    finally:
        for p in (theirs, ours):
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.wait(5)
