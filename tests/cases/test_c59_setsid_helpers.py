"""Case C59 (tests/cases/data/C59/README.md): a helper a server started in a session of its own.

The case's ``exec_env`` starts its executor daemon with ``start_new_session=True`` (it leaves the
server's process group) bound to a helper port. At ``--isolation none`` nothing of it may survive
a stop (SIGTERM), a SIGKILLed daemon (its watchdog), or, where even the watchdog was killed, the
next start; the stop says what it had to kill. The fixture server below does what the case's
``app.py`` does, with the stdlib only (no venv to build).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from pathlib import Path

import psutil

from tests.helpers.cases import CASES
from tests.helpers.daemon import FIXTURE_APP, kill_tree, read_ready_line, up_process, wait_gone, write_fixture_package
from tests.helpers.gym_servers import free_port

CASE_APP = CASES / "C59" / "pkg" / "resources_servers" / "exec_env" / "app.py"


def _app(port: int, tag: str) -> str:
    helper = (
        "import socket, time\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        f"s.bind(('127.0.0.1', {port})); s.listen()\n"
        "while True: time.sleep(3600)\n"
    )
    return (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', {helper!r}, {tag!r}], start_new_session=True)\n" + FIXTURE_APP
    )


def _package(tmp_path: Path) -> tuple[Path, int, str]:
    assert "start_new_session=True" in CASE_APP.read_text()  # what the case's server does
    port, tag = free_port(), f"c59-executor-daemon-{tmp_path.name}"
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {"exec_env": {"resources_servers": {"exec_env": {"domain": "coding"}}}},
        apps={"exec_env": _app(port, tag)},
        name="c59-exec",
    )
    return pkg, port, tag


def _helpers(tag: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        if tag in (p.info["cmdline"] or []) and p.status() != psutil.STATUS_ZOMBIE:
            out.append(p)
    return out


def _wait_helper(proc: subprocess.Popen, tag: str) -> psutil.Process:
    """The helper, once it runs in a session of its own (it is started before the server answers)."""
    read_ready_line(proc, timeout=300)
    (helper,) = _helpers(tag)
    assert os.getsid(helper.pid) == helper.pid  # it left the server's session and group
    return helper


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_c59_a_stop_at_none_stops_the_helper_and_says_so(tmp_path: Path) -> None:
    pkg, port, tag = _package(tmp_path)
    proc = up_process(pkg, tmp_path, "--isolation", "none")
    try:
        helper = _wait_helper(proc, tag)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, err[-3000:]
    assert wait_gone([helper.pid], timeout=10, zombies_count=False) == []
    assert _port_free(port)
    said = re.search(r"stopped 1 process\(es\) that had left their server's process group \(setsid\): pid (\d+)", err)
    assert said and int(said.group(1)) == helper.pid, err[-3000:]


def test_c59_a_sigkilled_daemons_watchdog_stops_the_helper(tmp_path: Path) -> None:
    pkg, port, tag = _package(tmp_path)
    proc = up_process(pkg, tmp_path, "--isolation", "none")
    try:
        helper = _wait_helper(proc, tag)
        proc.kill()
        proc.wait(30)
        assert wait_gone([helper.pid], timeout=30, zombies_count=False) == []  # the watchdog's doing
    finally:
        kill_tree(proc)
    assert _port_free(port)


def test_c59_the_next_start_stops_what_a_killed_run_left(tmp_path: Path) -> None:
    """Daemon and watchdog both SIGKILLed (an OOM kill of the whole session): the helper survives
    until the next ``up`` on this host, which stops it before it starts anything."""
    pkg, port, tag = _package(tmp_path)
    proc = up_process(pkg, tmp_path, "--isolation", "none")
    try:
        helper = _wait_helper(proc, tag)
        watchdogs = [c for c in psutil.Process(proc.pid).children() if any("watchdog.py" in a for a in c.cmdline())]
        assert watchdogs
        for w in watchdogs:
            w.kill()
        proc.kill()
        proc.wait(30)
        psutil.wait_procs(watchdogs, timeout=10)
        assert helper.is_running() and helper.status() != psutil.STATUS_ZOMBIE
    finally:
        kill_tree(proc)
    again = up_process(pkg, tmp_path / "again", "--isolation", "none")
    try:
        read_ready_line(again, timeout=300)  # the new helper binds the port the old one held
        assert not helper.is_running() or helper.status() == psutil.STATUS_ZOMBIE
        again.send_signal(signal.SIGTERM)
        _, err = again.communicate(timeout=120)
    finally:
        kill_tree(again)
    assert again.returncode == 0, err[-3000:]
    assert f"left by a run whose daemon was killed: pid {helper.pid}" in err
    assert _helpers(tag) == [] and _port_free(port)
