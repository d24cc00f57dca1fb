"""SIGKILL of the daemon leaves no sandboxed process behind (docs/architecture.md §6):
PDEATHSIG on the outer process + bubblewrap's pid namespace with --die-with-parent catch even a
double-forked setsid grandchild."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from sandbox import IsolationLevel

APP = Path(__file__).parent / "apps" / "daemon_like.py"
ROOT = Path(__file__).resolve().parents[2]


def _run_and_kill(
    tmp_path: Path, level: str, python: Path, wait_s: float = 5
) -> tuple[dict, list[psutil.Process], float, list[psutil.Process]]:
    daemon = subprocess.Popen(
        [sys.executable, str(APP), str(tmp_path / "work"), level, str(python)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        line = daemon.stdout.readline()
        assert line.startswith("READY "), line
        info = json.loads(line[6:])
        victims = psutil.Process(daemon.pid).children(recursive=True)
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()
        t0 = time.monotonic()
        gone, alive = psutil.wait_procs(victims, timeout=wait_s)
        return info, [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], time.monotonic() - t0, victims
    finally:
        if daemon.poll() is None:
            daemon.kill()


def test_sigkill_of_daemon_leaves_nothing(tmp_path, plain_python, full_available):
    if not full_available:
        pytest.skip("full isolation is not available on this host")
    info, alive, _, victims = _run_and_kill(tmp_path, "auto", plain_python)
    assert info["level"] == "full"
    assert len(victims) >= 6  # holder, bwrap x2, forker, its child, the setsid grandchild
    assert alive == [], [(p.pid, p.name()) for p in alive]


def test_level_none_still_reaps_direct_children(tmp_path, plain_python):
    """Without a pid namespace only PDEATHSIG acts: the direct child dies; the warning says so."""
    started = time.time() - 1
    alive: list[psutil.Process] = []
    try:
        info, alive, _, victims = _run_and_kill(tmp_path, IsolationLevel.NONE.value, plain_python, wait_s=1)
        assert info["level"] == "none" and info["warning"].startswith("EGRESS NOT ENFORCED")
        direct = [p for p in victims if p.pid not in {a.pid for a in alive}]
        assert direct, "the PDEATHSIG'd server process must be gone"
    finally:
        _kill_survivors(started, alive)


def _kill_survivors(since: float, known: list[psutil.Process]) -> None:
    """Descendants of a none-level server survive by design: the plain child (``known``, seen in the
    daemon's tree before the kill) and the double-forked grandchild (re-parented to init at once, so
    only its ``forker.py`` command line finds it). Clean up after ourselves."""
    found = [
        p
        for p in psutil.process_iter(["cmdline", "create_time"])
        if p.info["create_time"] >= since and any("forker.py" in a for a in p.info["cmdline"] or [])
    ]
    for p in [*known, *found]:
        try:
            p.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def test_a_sandbox_closed_as_soon_as_it_spawned_leaves_nothing(tmp_path, plain_python, full_available):
    """A KILL milliseconds after the spawn, before bubblewrap's child has set its parent-death
    signal, used to leave that child (the sandbox's init) and the app running under pid 1 (7 of
    20 sandboxes here). The outer bubblewrap is now stopped before the tree is taken."""
    if not full_available:
        pytest.skip("full isolation is not available on this host")
    import asyncio

    from sandbox import EgressPolicy, ProcessSpec, Sandbox

    mark = f"gr-spawn-kill-{os.getpid()}-{time.monotonic_ns()}"

    async def once(i: int) -> None:
        sb = await Sandbox.start(EgressPolicy.from_environ({}), tmp_path / f"sb{i}")
        out = os.open(tmp_path / "out.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            sb.spawn(
                ProcessSpec(
                    "s",
                    [str(plain_python), "-c", "import time; time.sleep(120)", mark],
                    tmp_path,
                    {"PATH": "/usr/bin:/bin"},
                    read_only_paths=[plain_python.parent.parent],
                    stdout_fd=out,
                    stderr_fd=out,
                    private_env={"GR_TEST_PRIVATE": "x"},
                )
            )
        finally:
            os.close(out)
            await sb.close()

    async def main() -> None:
        for i in range(20):
            await once(i)

    asyncio.run(main())
    time.sleep(0.3)
    left = [p for p in psutil.process_iter(["cmdline"]) if mark in (p.info["cmdline"] or [])]
    for p in left:
        p.kill()
    assert left == [], [(p.pid, p.name()) for p in left]
