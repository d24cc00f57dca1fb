"""Two daemons on one GYM_RUNTIME_HOME: the second is refused while the first lives (or runs with
its own --work-dir without touching the first's record); a dead daemon's record is replaced."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers.daemon import kill_tree, read_ready_line, simple_env, up_process


def _up(pkg: Path, home: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gym_runtime.cli.main", "up", str(pkg), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "GYM_RUNTIME_HOME": str(home)},
    )


def _status(home: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "status", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "GYM_RUNTIME_HOME": str(home)},
    )


def test_second_daemon_on_one_home(tmp_path: Path) -> None:
    pkg, home = simple_env(tmp_path / "pkg"), tmp_path / "home"
    first = _up(pkg, home)
    procs = [first]
    try:
        info = json.loads(read_ready_line(first))
        second = _up(pkg, home)
        procs.append(second)
        out, err = second.communicate(timeout=60)
        assert second.returncode == 3 and out == ""
        assert "GR-DAEMON-RUNNING" in err and f"pid {first.pid}" in err and info["head_server"] in err
        assert "GYM_RUNTIME_HOME" in err and "--work-dir" in err
        assert json.loads((home / "daemon.json").read_text())["pid"] == first.pid

        third = up_process(pkg, tmp_path, env={"GYM_RUNTIME_HOME": str(home)})  # its own --work-dir: allowed
        procs.append(third)
        read_ready_line(third)
        os.kill(third.pid, signal.SIGTERM)
        assert third.wait(10) == 0
        assert "--head URL" in third.stderr.read()
        assert json.loads((home / "daemon.json").read_text())["pid"] == first.pid  # not deleted by the third
        r = _status(home)
        assert r.returncode == 0 and json.loads(r.stdout)["head_server"] == info["head_server"]

        os.kill(first.pid, signal.SIGKILL)  # leaves a stale record
        first.wait(10)
        fourth = _up(pkg, home)
        procs.append(fourth)
        read_ready_line(fourth)
        assert json.loads((home / "daemon.json").read_text())["pid"] == fourth.pid
        os.kill(fourth.pid, signal.SIGTERM)
        assert fourth.wait(10) == 0
        assert f"replacing the stale record of daemon pid {first.pid}" in fourth.stderr.read()
        assert not (home / "daemon.json").exists()
        last = json.loads((home / "last_run.json").read_text())
        assert last["pid"] == fourth.pid and Path(last["logs_dir"]).is_dir()
        r = _status(home)
        assert r.returncode == 1 and "GR-HEAD-UNKNOWN" in r.stderr
    finally:
        for p in procs:
            kill_tree(p)


def test_unwritable_home_is_a_clear_error(tmp_path: Path) -> None:
    home = tmp_path / "file-not-dir"
    home.write_text("")
    proc = _up(simple_env(tmp_path / "pkg"), home)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3 and "GR-DAEMON-RECORD" in err and "Traceback" not in err
