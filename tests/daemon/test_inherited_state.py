"""What the daemon inherits besides signals (gym_runtime/inherited.py): closed standard descriptors,
the open-file limit, and the drop-in's narrower reset inside a trainer's process. The signal cases
are tests/cases/test_c66_c68_inherited_signals.py, HOME and the passwd entry test_c69_no_passwd_entry.py."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from tests.helpers.daemon import kill_tree, read_ready_line, simple_env, write_fixture_package

ROOT = Path(__file__).resolve().parents[2]


def _up(pkg: Path, tmp: Path, preexec: Callable[[], None]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gym_runtime.cli.main", "up", str(pkg), "--work-dir", str(tmp / "run")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
        preexec_fn=preexec,
    )


def _limits(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-file limit in /proc/PID/limits")


def test_closed_stdin_and_stderr_get_dev_null(tmp_path: Path) -> None:
    """A launcher that closed fds 0 and 2: the daemon runs with /dev/null there (nothing it opens
    later takes them), prints its ready line on stdout and stops as usual."""

    def close_0_and_2() -> None:
        os.close(0)
        os.close(2)

    proc = _up(simple_env(tmp_path / "pkg"), tmp_path, close_0_and_2)
    try:
        read_ready_line(proc, timeout=300)
        assert os.readlink(f"/proc/{proc.pid}/fd/0") == os.devnull
        assert os.readlink(f"/proc/{proc.pid}/fd/2") == os.devnull
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0


def test_soft_open_file_limit_is_raised_to_the_hard_one(tmp_path: Path) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    proc = _up(
        simple_env(tmp_path / "pkg"),
        tmp_path,
        lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, top)),
    )
    try:
        read_ready_line(proc, timeout=300)
        assert _limits(proc.pid) == (top, top)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, err[-3000:]
    assert f"inherited: open-file limit raised from 256 to {top} (its hard limit)" in err


def test_too_many_servers_for_the_open_file_limit_is_one_block(tmp_path: Path) -> None:
    """24 server instances under a hard limit of 1024 (a common default): refused before any venv
    is built, naming the limit, the need and the fix."""
    pkg = write_fixture_package(
        tmp_path / "pkg",
        {f"calc_{i}": {"resources_servers": {f"calc_{i}": {"domain": "math"}}} for i in range(24)},
        name="many-servers",
    )
    home = Path(os.environ["GYM_RUNTIME_HOME"])
    proc = _up(pkg, tmp_path, lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024)))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err[-3000:]
    assert "error[GR-INHERITED-NOFILE]: the open-file limit (RLIMIT_NOFILE) is 1024 (hard limit 1024)" in err
    assert "24 server instance(s) need about 1600 descriptors" in err and "15 would fit" in err
    assert "hint: raise the hard limit to at least 1600" in err and "Traceback" not in err
    assert not (home / "venvs").exists() or not any((home / "venvs").iterdir())


def _in_a_process(code: str) -> subprocess.CompletedProcess:
    script = "import signal, threading\nfrom gym_runtime import inherited\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_the_drop_in_leaves_the_trainers_handlers_and_mask_alone() -> None:
    """``normalise(process_wide=False)`` (RunHelper.start): the caller's SIGTERM handler and mask stay;
    an ignored SIGCHLD is set back from the main thread; from another thread it is one error block."""
    done = _in_a_process(
        """
        handler = lambda *a: None
        signal.signal(signal.SIGTERM, handler)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        notes = inherited.normalise(process_wide=False)
        assert signal.getsignal(signal.SIGTERM) is handler
        assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == {signal.SIGUSR1}
        assert signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL, notes
        assert notes == ["ignored signals (SIGCHLD) set back to their default"], notes
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        errors = []
        def call():
            try:
                inherited.normalise(process_wide=False)
            except Exception as e:
                errors.append(e)
        t = threading.Thread(target=call)
        t.start()
        t.join()
        print(errors[0].render())
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("error[GR-INHERITED-SIGNALS]: SIGCHLD is ignored in this process")
    assert "hint: call RunHelper.start from the main thread" in done.stdout
