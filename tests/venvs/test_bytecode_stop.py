"""A stop during a harvest does not wait for the harvest's file work: the daemon's process exits
once :meth:`EnvironmentBytecode.close` returns, whatever a walk, an ``rmtree`` of a learning dir or a
store save still has to do (the interpreter's exit joins the threads of ``asyncio.to_thread``;
measured: 2 s of a 3.4 s stop right after a learning start's ready). A real process; a slow disk
is stood in for by an ``rmtree`` that takes 5 s."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

SCRIPT = r"""
import asyncio, shutil, sys, threading, time
from pathlib import Path
from gym_runtime.venvs import env_bytecode

entered, real = threading.Event(), shutil.rmtree
def slow_rmtree(path, *args, **kwargs):  # a slow disk removing a learning dir of thousands of files
    entered.set()
    time.sleep(5)
    real(path, *args, **kwargs)
shutil.rmtree = slow_rmtree

async def main(venv):
    eb = env_bytecode.EnvironmentBytecode()
    cache = eb.user(venv / "bin" / "python", "resources_servers/acme_math /pkg", "acme_math")
    assert cache.learning
    eb.learn(lambda name: True)  # the process is ready: its learning dir is finished and removed
    while not entered.is_set():
        await asyncio.sleep(0.01)
    await eb.close()
    print(time.monotonic(), flush=True)

asyncio.run(main(Path(sys.argv[1])))
"""


def test_a_stop_during_a_harvest_exits_without_waiting_for_its_file_work(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(venv)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = proc.communicate(timeout=60)
    exited = time.monotonic()
    assert proc.returncode == 0, err
    closed = float(out.strip())
    assert exited - closed < 2.0, f"the exit waited {exited - closed:.1f}s for the harvest's rmtree"
    learn = venv / ".gym-runtime" / "learn"
    assert not list(learn.iterdir()) or all((d / "key").exists() for d in learn.iterdir()), (
        "a learning dir left behind is one the next start harvests or removes"
    )
    assert "resources_servers/acme_math /pkg" in (venv / ".gym-runtime" / "pycache.json").read_text(), (
        "the user was recorded before its learning dir was removed"
    )
