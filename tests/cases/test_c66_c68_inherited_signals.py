"""Cases C66 and C68 (tests/cases/data/C66/README.md, C68/README.md): the signal state a launcher
hands the daemon, and SIGHUP when its terminal goes away.

C66: SIGHUP stops ``up`` and ``dry-run --watch`` the way SIGTERM does (the stop line, exit 0 / 130,
the daemon record removed, nothing left running), unless it came in ignored (``nohup``): then the
daemon outlives the terminal, says so, and its servers still start with SIGHUP at its default.
C68: the daemon exec'd by the case's ``sigwrap.py`` with SIGCHLD ignored keeps the isolation level
the host gives (no bubblewrap probe waiting out its timeout); with SIGTERM blocked, SIGTERM stops
it, and no server sits out its grace (each got an empty mask).
gym_runtime/inherited.py holds the normalisation; sandbox/launch.py the servers' clean state.
"""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from sandbox.probe import probe_isolation
from tests.helpers.cases import case_dir
from tests.helpers.daemon import (
    SIMPLE_SERVERS,
    descendants,
    kill_tree,
    read_ready_line,
    simple_env,
    wait_gone,
)

ROOT = Path(__file__).resolve().parents[2]
SIGWRAP = case_dir("C68") / "sigwrap.py"
SERVER_NAMES = {s[:15] for s in SIMPLE_SERVERS}  # a server process's name: its instance (comm: 15 bytes)


def _wait_for(path: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text():
        assert time.monotonic() < deadline, f"no {text!r} in time:\n{path.read_text()[-3000:]}"
        time.sleep(0.2)


def _bit(sig: int) -> int:
    return 1 << (sig - 1)


def _masks(pid: int) -> dict[str, int]:
    """``SigBlk`` and ``SigIgn`` of ``pid`` (``/proc/PID/status``), as integers."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("SigBlk", "SigIgn"):
            out[key] = int(value.strip(), 16)
    return out


def _servers(pid: int) -> list[psutil.Process]:
    found = [p for p in descendants(pid) if p.name() in SERVER_NAMES]
    assert {p.name() for p in found} == SERVER_NAMES, [p.name() for p in descendants(pid)]
    return found


def _up(
    pkg: Path, tmp: Path, *flags: str, wrap: tuple[str, ...] = (), preexec: Callable[[], None] | None = None
) -> subprocess.Popen:
    """``gym-runtime up PKG`` in a session of its own, started through ``wrap`` (the case's
    ``sigwrap.py``) or with ``preexec`` run before the exec (a launcher's state)."""
    argv = [sys.executable, "-m", "gym_runtime.cli.main", "up", str(pkg), "--work-dir", str(tmp / "run"), *flags]
    return subprocess.Popen(
        [*wrap, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
        preexec_fn=preexec,
    )


def _stop(proc: subprocess.Popen, sig: int, timeout: float = 120) -> tuple[list[int], str]:
    """Send ``sig``, wait for the exit; returns the pids the daemon's tree had and its stderr."""
    tree = [p.pid for p in descendants(proc.pid)]
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=timeout)
    return tree, err


def test_c66_sighup_stops_up_like_sigterm(tmp_path: Path) -> None:
    assert "kill -HUP" in (case_dir("C66") / "run.sh").read_text()  # what the case does to the daemon
    home = Path(os.environ["GYM_RUNTIME_HOME"])
    proc = _up(simple_env(tmp_path / "pkg"), tmp_path)
    try:
        read_ready_line(proc, timeout=300)
        assert (home / "daemon.json").is_file()
        tree, err = _stop(proc, signal.SIGHUP)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, err[-3000:]
    assert "SIGHUP: stopping" in err and "stop took" in err.splitlines()[-1], err[-3000:]
    assert "Traceback" not in err
    assert wait_gone(tree, timeout=10) == []
    assert not (home / "daemon.json").exists()  # the record is closed: the next start finds nothing stale


def test_c66_sighup_ignored_by_the_launcher_keeps_the_daemon_up(tmp_path: Path) -> None:
    """``nohup gym-runtime up``: the daemon outlives its terminal (documented choice), says so once,
    and its servers start with SIGHUP at its default, not ignored."""
    proc = _up(simple_env(tmp_path / "pkg"), tmp_path, preexec=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        read_ready_line(proc, timeout=300)
        for server in _servers(proc.pid):
            assert not _masks(server.pid)["SigIgn"] & _bit(signal.SIGHUP), server.name()
        proc.send_signal(signal.SIGHUP)
        time.sleep(2)
        assert proc.poll() is None
        _, err = _stop(proc, signal.SIGTERM)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, err[-3000:]
    assert "inherited: SIGHUP came in ignored (nohup)" in err
    assert "(SIGTERM/SIGINT to stop)" in err and "SIGHUP: stopping" not in err


@pytest.mark.pypi
def test_c66_sighup_stops_a_dry_run_watch(tmp_path: Path) -> None:
    """The case's second run: ``dry-run --watch`` of the bundled example, SIGHUP once it waits for edits."""
    pkg = ROOT / "examples" / "native-quickstart"
    argv = [sys.executable, "-m", "gym_runtime.cli.main", "dry-run", str(pkg), "--samples", "1", "--watch"]
    err_path = tmp_path / "stderr.txt"
    with err_path.open("w") as err_file:
        proc = subprocess.Popen(
            [*argv, "--work-dir", str(tmp_path / "run")],
            stdout=subprocess.DEVNULL,
            stderr=err_file,
            cwd=ROOT,
            start_new_session=True,
        )
        try:
            _wait_for(err_path, "for edits", timeout=600)
            tree = [p.pid for p in descendants(proc.pid)]
            proc.send_signal(signal.SIGHUP)
            proc.wait(120)
        finally:
            kill_tree(proc)
    err = err_path.read_text()
    assert proc.returncode == 130, err[-3000:]
    assert "stop took" in err and "Traceback" not in err, err[-3000:]
    assert wait_gone(tree, timeout=10) == []


def _terminal_goes_away(argv: list[str], ready: bytes) -> tuple[int, list[int]]:
    """Run ``argv`` with stdout and stderr on a terminal (a pty), wait for ``ready`` on it, then
    close the terminal (every later write fails with EIO, as after an ssh drop) and send SIGHUP;
    returns the exit status and the pids the run had."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, cwd=ROOT, start_new_session=True
    )
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 600
        while ready not in seen:
            assert time.monotonic() < deadline and proc.poll() is None, seen.decode(errors="replace")[-3000:]
            seen += os.read(master, 65536)
        tree = [p.pid for p in descendants(proc.pid)]
        os.close(master)
        proc.send_signal(signal.SIGHUP)
        return proc.wait(120), tree
    finally:
        kill_tree(proc)


@pytest.mark.parametrize("command", ["up", pytest.param("dry-run --watch", marks=pytest.mark.pypi)])
def test_c66_sighup_after_the_terminal_went_away_still_stops_gracefully(tmp_path: Path, command: str) -> None:
    """An ssh session that drops: the terminal the progress lines go to is gone before SIGHUP comes.
    The stop still runs whole: every server got SIGTERM (its log says ``terminated``, not the
    watchdog's kill), the record is removed, the exit status is the stop's."""
    home = Path(os.environ["GYM_RUNTIME_HOME"])
    cli = [sys.executable, "-m", "gym_runtime.cli.main"]
    if command == "up":
        argv = [*cli, "up", str(simple_env(tmp_path / "pkg")), "--work-dir", str(tmp_path / "run")]
        code, tree = _terminal_goes_away(argv, b'"status": "ready"')
    else:
        pkg = ROOT / "examples" / "native-quickstart"
        argv = [*cli, "dry-run", str(pkg), "--samples", "1", "--watch", "--work-dir", str(tmp_path / "run")]
        code, tree = _terminal_goes_away(argv, b"for edits")
    assert code == (0 if command == "up" else 130)
    assert wait_gone(tree, timeout=10) == []
    assert not (home / "daemon.json").exists()
    logs = list((tmp_path / "run" / "logs").glob("*.log"))
    assert logs
    for log in logs:
        if log.stem in ("stub_model", "head") or "sandbox" in log.stem:
            continue
        ends = [ln for ln in log.read_text().splitlines() if "exited: status" in ln]
        assert ends and "terminated" in ends[-1], (log.name, ends)


def test_c68_ignored_sigchld_keeps_the_isolation_level(tmp_path: Path) -> None:
    """SIGCHLD ignored by the launcher (the case's ``sigwrap.py ignore-chld``): the daemon sets it back,
    says so, and the bubblewrap probe sees its children exit: the level is the host's own."""
    proc = _up(simple_env(tmp_path / "pkg"), tmp_path, wrap=(sys.executable, str(SIGWRAP), "ignore-chld", "--"))
    try:
        ready = json.loads(read_ready_line(proc, timeout=300))
        _, err = _stop(proc, signal.SIGTERM)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, err[-3000:]
    assert ready["isolation"] == probe_isolation().level.value
    assert "inherited: ignored signals (SIGCHLD) set back to their default" in err
    assert "timed out" not in err and "Traceback" not in err


def test_c68_blocked_sigterm_still_stops_the_daemon_and_its_servers(tmp_path: Path) -> None:
    """SIGTERM blocked by the launcher (``sigwrap.py block-term``): the daemon unblocks it, its servers
    start with an empty mask, and SIGTERM stops everything gracefully. With a 60 s grace a server
    that still had SIGTERM blocked would hold the stop past the wait below."""
    proc = _up(
        simple_env(tmp_path / "pkg"),
        tmp_path,
        "--shutdown-grace",
        "60",
        wrap=(sys.executable, str(SIGWRAP), "block-term", "--"),
    )
    try:
        read_ready_line(proc, timeout=300)
        assert _masks(proc.pid)["SigBlk"] == 0
        for server in _servers(proc.pid):
            assert _masks(server.pid)["SigBlk"] == 0, server.name()
        tree, err = _stop(proc, signal.SIGTERM, timeout=50)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, err[-3000:]
    assert "inherited: blocked signals (SIGTERM) unblocked" in err
    assert "ignored SIGTERM" not in err, err[-3000:]
    assert wait_gone(tree, timeout=10) == []
