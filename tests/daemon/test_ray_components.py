"""Each process of a Ray head is named for what it is in the process accounting
(gym_runtime/supervise/processes.py): Ray retitles its dashboard and runtime-env agents
``ray::DashboardAgent`` and ``ray::RuntimeEnvAgent`` once they run, which read as workers (a
``ray::`` title) in the 22-server blend's ``GET /processes``."""

from __future__ import annotations

import subprocess
import time

import psutil
import pytest

from gym_runtime.supervise.processes import _component


@pytest.mark.parametrize(
    ("title", "label"),
    [
        ("ray::DashboardAgent", "dashboard agent"),
        ("ray::RuntimeEnvAgent", "runtime-env agent"),
        ("ray::IDLE", "worker"),
    ],
)
def test_a_retitled_ray_process_is_named_for_what_it_is(title: str, label: str) -> None:
    proc = subprocess.Popen(["bash", "-c", 'exec -a "$0" sleep 30', title])
    try:
        p = psutil.Process(proc.pid)
        deadline = time.monotonic() + 10
        while p.cmdline()[:1] != [title] and time.monotonic() < deadline:  # until bash has exec'd
            time.sleep(0.01)
        assert _component(p) == label
    finally:
        proc.kill()
        proc.wait()
