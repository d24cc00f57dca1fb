"""A private Ray head's temp dir outlives a daemon killed with SIGKILL (nothing is left to remove
it); the next start removes it, and never the dir of a head that runs or is being started."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from gym_runtime.ray.head import make_temp_dir, remove_stale_temp_dirs, remove_temp_dir

SLEEP = "import time; time.sleep(60)"


def test_a_killed_runs_ray_temp_dir_is_removed_but_not_one_in_use_or_just_made() -> None:
    stale, named, holding, new = (make_temp_dir() for _ in range(4))
    old = time.time() - 120
    for d in (stale, named, holding):
        os.utime(d, (old, old))
    procs = [
        subprocess.Popen([sys.executable, "-c", SLEEP, str(named / "session_latest" / "logs")]),  # as Ray's do
        subprocess.Popen([sys.executable, "-c", SLEEP], cwd=holding),
    ]  # as the head's holder does
    try:
        deadline = time.monotonic() + 10
        while not all(os.path.exists(f"/proc/{p.pid}/cmdline") for p in procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # the interpreter has exec'd: its command line is the final one
        gone = remove_stale_temp_dirs()
        assert stale in gone and not stale.exists()
        assert not {named, holding, new} & set(gone) and all(d.is_dir() for d in (named, holding, new))
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for d in (stale, named, holding, new):
            remove_temp_dir(d)
