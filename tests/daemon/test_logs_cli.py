"""``gym-runtime logs``: ``--follow`` ends when the daemon stops (after its last lines); with no
daemon running it prints the last run's log and lists the instance's log files."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.daemon import kill_tree, read_ready_line, simple_env, up_process


def _logs(home: Path, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gym_runtime.cli.main", "logs", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "GYM_RUNTIME_HOME": str(home)},
        **kw,
    )


def _read_until(proc: subprocess.Popen, text: str, timeout: float = 30.0) -> str:
    """Raw reads of ``proc``'s stdout (no text buffering to hide lines from select) until ``text``."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    seen, deadline = b"", time.monotonic() + timeout
    while text.encode() not in seen:
        assert time.monotonic() < deadline and sel.select(max(deadline - time.monotonic(), 0)), seen
        chunk = os.read(proc.stdout.fileno(), 65536)
        assert chunk, f"logs exited early: {proc.wait(5)} {proc.stderr.read()}"
        seen += chunk
    return seen.decode()


def test_follow_ends_with_the_daemon_and_files_remain_readable(tmp_path: Path) -> None:
    home = tmp_path / "home"
    daemon = up_process(simple_env(tmp_path / "pkg"), tmp_path, env={"GYM_RUNTIME_HOME": str(home)})
    follow = None
    try:
        read_ready_line(daemon)
        follow = _logs(home, "acme_math", "--follow", "--tail", "5")
        seen = _read_until(follow, "fixture acme_math listening")
        os.kill(daemon.pid, signal.SIGTERM)
        assert daemon.wait(10) == 0
        out, err = follow.communicate(timeout=10)
        assert follow.returncode == 0
        assert "exited: status" in seen + out  # the daemon's last note about the server, printed before leaving
        assert "the daemon is gone" in err
    finally:
        kill_tree(daemon)
        if follow is not None:
            follow.kill()

    after = _logs(home, "acme_math")
    out, err = after.communicate(timeout=30)
    assert after.returncode == 0 and "fixture acme_math listening" in out
    assert "no running daemon" in err and str(tmp_path / "run/logs/acme_math.log") in err
    build_logs = list((home / "logs/build").glob("acme_math-*.log"))
    assert build_logs and all(str(p) in err for p in build_logs)

    none = _logs(home, "nope")
    out, err = none.communicate(timeout=30)
    assert none.returncode == 1 and "GR-LOGS-NO-DAEMON" in err


def _up_in_home(pkg: Path, home: Path, index: str) -> subprocess.CompletedProcess:
    """``up PKG`` with its run dir under ``home/runs`` (no --work-dir), stopped by SIGTERM once ready."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("UV_")},
        "GYM_RUNTIME_HOME": str(home),
        "UV_INDEX_URL": index,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "gym_runtime.cli.main", "up", str(pkg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        if proc.stdout.readline():  # ready: stop it
            os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_after_a_failed_build_logs_shows_the_build_error_and_names_older_runs(tmp_path: Path) -> None:
    import json

    from tests.helpers.index import write_simple_index

    (tmp_path / "no-files").mkdir()
    index = write_simple_index(tmp_path / "no-files", tmp_path / "index")  # empty: any install fails
    home, pkg = tmp_path / "home", simple_env(tmp_path / "pkg")
    assert _up_in_home(pkg, home, index).returncode == 0  # an older, good run
    (older,) = (home / "runs").iterdir()
    (pkg / "resources_servers/acme_math/requirements.txt").write_text("nosuch-acme-dep==1.0\n")
    failed = _up_in_home(pkg, home, index)
    assert failed.returncode == 3 and "nosuch-acme-dep" in failed.stderr
    last = json.loads((home / "last_run.json").read_text())
    assert not Path(last["work_dir"]).exists()  # the build failed before the run dir was made

    r = _logs(home, "acme_math")
    out, err = r.communicate(timeout=30)
    assert r.returncode == 3 and "nosuch-acme-dep" in out  # uv's error lines, from the failing build log
    assert out.startswith("error:") and "[exit status" not in out
    assert "failed building the venv of 'acme_math' at stage1" in err and "before creating its run directory" in err
    assert "GR-BUILD-MISSING" in err and "from the failing build log" in err
    assert last["work_dir"] not in err and str(older) not in err  # neither the missing dir nor a stale run

    r = _logs(home, "acme_agent")  # its build was fine: the older run's log, named as such
    out, err = r.communicate(timeout=30)
    assert r.returncode == 0 and "fixture acme_agent listening" in out
    assert f"showing the log of an older run, {older} (last written " in err and last["work_dir"] not in err


def test_logs_after_a_failed_build_command_names_that_build(tmp_path: Path) -> None:
    """``gym-runtime build`` failing after an older good run: ``logs`` shows that build's error for
    the server that failed (exit 3), and for the other servers the older run's log, never the
    failed build's log attributed to the old run; a later good build clears the failure."""
    from tests.helpers.index import write_simple_index

    (tmp_path / "no-files").mkdir()
    index = write_simple_index(tmp_path / "no-files", tmp_path / "index")
    home, pkg = tmp_path / "home", simple_env(tmp_path / "pkg")
    assert _up_in_home(pkg, home, index).returncode == 0
    req = pkg / "resources_servers/acme_math/requirements.txt"
    req.write_text("nosuch-acme-dep==1.0\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("UV_")},
        "GYM_RUNTIME_HOME": str(home),
        "UV_INDEX_URL": index,
    }
    build = subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "build", str(pkg)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert build.returncode == 3
    r = _logs(home, "acme_math")
    out, err = r.communicate(timeout=30)
    assert r.returncode == 3 and "nosuch-acme-dep" in out
    assert "the last `gym-runtime build` (pid " in err and "failed building the venv of 'acme_math'" in err
    r = _logs(home, "acme_agent")
    out, err = r.communicate(timeout=30)
    assert r.returncode == 0 and "fixture acme_agent listening" in out and "nosuch-acme-dep" not in out + err
    req.write_text("# stdlib only\n")
    assert (
        subprocess.run(
            [sys.executable, "-m", "gym_runtime.cli.main", "build", str(pkg)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        ).returncode
        == 0
    )
    r = _logs(home, "acme_math")
    out, err = r.communicate(timeout=30)
    assert r.returncode == 0 and "fixture acme_math listening" in out
