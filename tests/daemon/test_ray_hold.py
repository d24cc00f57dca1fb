"""The private Ray head's holder (gym_runtime/ray/hold/): it holds what its start command
left behind, ends the whole head when one of those processes ends, reaps other orphans silently,
and leaves nothing on SIGTERM. Real processes: a start command that, like ``ray start --head``
without ``--block``, starts long-lived processes and exits; one that, like ``ray start --block``
(what holds the head where no child subreaper can be had), stays and watches them; the hook is
checked on its own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from gym_runtime.ray import head as ray_head
from tests.helpers.daemon import wait_gone

# A start command: two long-lived "Ray processes" that outlive it, each reporting its pid. The
# "raylet" starts a "worker" that starts a "task child" (3 s) and ends at once: the task child is
# orphaned after the start, as a Ray task's subprocess is when its worker ends.
TASK_CHILD = "import time; time.sleep(3)"
WORKER = f"import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', {TASK_CHILD!r}]); open('task.pid', 'w').write(str(p.pid))"
RAYLET = f"import subprocess, sys, time; subprocess.run([sys.executable, '-c', {WORKER!r}]); time.sleep(3600)"
START = f"""
import subprocess, sys
for name, code in (("gcs", "import time; time.sleep(3600)"), ("raylet", {RAYLET!r})):
    p = subprocess.Popen([sys.executable, "-c", code])
    print(name, p.pid, flush=True)
print("Ray runtime started.", flush=True)
"""


# As ``ray start --head --block`` (Ray 2.60 ``ray/scripts/scripts.py``): it says it blocks, then
# watches its processes; when one ends it says so, kills the others and exits 1.
BLOCKING = (
    START.replace("    p = subprocess.Popen", "    p = started[name] = subprocess.Popen").replace(
        "for name, code", "started = {}\nfor name, code"
    )
    + """
import os, signal, time
assert sys.argv[-1] == "--block", sys.argv
print("This command will now block forever until terminated by a signal.", flush=True)
while all(p.poll() is None for p in started.values()):
    time.sleep(0.1)
print("Some Ray subprocesses exited unexpectedly:", flush=True)
for p in started.values():
    p.kill()
os._exit(1)
"""
)


def _hold(
    tmp_path: Path, script: str = START, ready: bool = True, *args: str
) -> tuple[subprocess.Popen, dict[str, int]]:
    start = tmp_path / "start.py"
    start.write_text(script)
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", str(ray_head.HOLD_SCRIPT), sys.executable, str(start), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cwd=tmp_path,
    )
    pids = {}
    for line in proc.stdout:
        if line.startswith("Ray runtime started"):
            break
        name, pid = line.split()
        pids[name] = int(pid)
    if ready:  # the daemon's readiness: the holder's own line, once the start has exited
        held = proc.stderr.readline()
        assert held.startswith(ray_head.READY_TEXT + " 2 Ray processes"), held
    return proc, pids


def _children(pid: int) -> set[int]:
    return {p.pid for p in psutil.Process(pid).children()}


def test_the_holder_adopts_what_the_start_left_and_ends_the_head_when_one_of_them_ends(tmp_path: Path) -> None:
    proc, pids = _hold(tmp_path)
    try:
        assert set(pids.values()) <= _children(proc.pid)  # adopted by the time it says so
        os.kill(pids["gcs"], signal.SIGKILL)
        assert proc.wait(30) == 1
        assert wait_gone(list(pids.values()), 10.0) == []
    finally:
        _kill(proc)


def test_the_holder_says_which_process_ended(tmp_path: Path) -> None:
    proc, pids = _hold(tmp_path)
    try:
        time.sleep(0.5)
        os.kill(pids["raylet"], signal.SIGKILL)
        assert proc.wait(30) == 1
        err = proc.stderr.read()
        assert f"(pid {pids['raylet']}) ended (signal 9); stopping the head" in err, err
    finally:
        _kill(proc)


def test_an_adopted_orphan_that_ends_is_reaped_and_the_head_stays(tmp_path: Path) -> None:
    proc, pids = _hold(tmp_path)
    try:
        deadline, task = time.monotonic() + 10, None
        while task not in _children(proc.pid) and time.monotonic() < deadline:  # its worker has ended
            time.sleep(0.05)
            with contextlib.suppress(OSError, ValueError):
                task = int((tmp_path / "task.pid").read_text())
        assert task in _children(proc.pid)  # adopted by the holder (a child subreaper)
        assert wait_gone([task], 15.0) == []  # ended and reaped: no zombie left
        time.sleep(0.5)
        assert proc.poll() is None  # the head is still held
        assert _children(proc.pid) == set(pids.values())
    finally:
        _kill(proc)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_leaves_nothing(tmp_path: Path, sig: int) -> None:
    proc, pids = _hold(tmp_path)
    try:
        time.sleep(0.5)
        proc.send_signal(sig)
        assert proc.wait(10) == 0
        assert wait_gone([proc.pid, *pids.values()], 5.0) == []
    finally:
        _kill(proc)


def test_a_failed_start_fails_the_holder(tmp_path: Path) -> None:
    proc, _ = _hold(tmp_path, "import sys; print('boom', file=sys.stderr); sys.exit(3)", ready=False)
    assert proc.wait(30) == 1
    assert "`ray start` exited with 3" in proc.stderr.read()


def test_under_ray_start_block_the_holder_says_it_holds_and_a_stop_leaves_nothing(tmp_path: Path) -> None:
    proc, pids = _hold(tmp_path, BLOCKING, False, "--block")
    try:
        assert proc.stdout.readline().startswith("This command will now block forever")  # Ray's output, passed on
        held = proc.stderr.readline()
        assert held.startswith(ray_head.READY_TEXT + " 2 Ray processes under `ray start --block`"), held
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert wait_gone([proc.pid, *pids.values()], 5.0) == []
    finally:
        _kill(proc)


def test_under_ray_start_block_a_process_that_ends_ends_the_head(tmp_path: Path) -> None:
    proc, pids = _hold(tmp_path, BLOCKING, False, "--block")
    try:
        assert proc.stderr.readline().startswith(ray_head.READY_TEXT)
        os.kill(pids["raylet"], signal.SIGKILL)
        assert proc.wait(30) == 1
        assert "Some Ray subprocesses exited unexpectedly" in proc.stdout.read()
        assert "`ray start --block` exited with 1" in proc.stderr.read()
        assert wait_gone([proc.pid, *pids.values()], 5.0) == []
    finally:
        _kill(proc)


def test_the_hook_turns_off_ray_client_and_the_api_server_and_leaves_nothing_of_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sys.path.insert(0, str(ray_head.HOLD_DIR))
    try:
        import gym_runtime_ray_hold as hold
    finally:
        sys.path.remove(str(ray_head.HOLD_DIR))
    from ray._private import services

    monkeypatch.setattr(services, "start_api_server", services.start_api_server)  # restored after the test
    monkeypatch.setenv("RAY_START_HOOK", hold.HOOK)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([hold.HERE, "/elsewhere"]))
    params = SimpleNamespace(ray_client_server_port=10001)
    hold.lean_params(params, True)
    assert params.ray_client_server_port is None
    # no API server: what Ray's node gets when one cannot start (no URL, no process to hold)
    assert services.start_api_server(False, False, "127.0.0.1", "127.0.0.1:1", "00") == (None, None)
    assert "RAY_START_HOOK" not in os.environ and os.environ["PYTHONPATH"] == "/elsewhere"
    monkeypatch.setenv("PYTHONPATH", hold.HERE)
    hold.lean_params(params, True)
    assert "PYTHONPATH" not in os.environ


def test_ray_start_runs_without_the_command_groups_it_does_not_need() -> None:
    # Ray's command line as the holder runs it (real Ray, the dev dependency): `start` is there,
    # Ray Serve's, the job and the state commands, which only `ray --help` would show, are not
    sys.path.insert(0, str(ray_head.HOLD_DIR))
    try:
        import gym_runtime_ray_hold as hold
    finally:
        sys.path.remove(str(ray_head.HOLD_DIR))
    ray_bin = Path(sys.executable).parent / "ray"
    assert hold.lean([sys.executable, "-c", "pass"]) == [sys.executable, "-c", "pass"]  # not Ray's: as given

    def commands(argv: list[str]) -> set[str]:
        out = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=120, check=True).stdout
        listed = out.split("Commands:", 1)[1].splitlines()
        return {ln.split()[0] for ln in listed if ln.startswith("  ") and ln.split()}

    lean = hold.lean([str(ray_bin)])
    assert lean[1:3] == ["-c", hold.LEAN_CLI]
    full, lean_commands = commands([str(ray_bin)]), commands(lean)
    assert {"start", "stop", "status"} <= lean_commands and {"job", "list"} <= full  # (serve: where installed)
    assert full - lean_commands == {"job", "list", "get", "summary", "logs"} | ({"serve"} & full)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait(10)
