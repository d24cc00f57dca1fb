"""Resource limits: a server over its memory limit is stopped and reported as such, by the
cgroup where writable and by the psutil watcher otherwise; pids and open files are capped."""

from __future__ import annotations

import asyncio
import os

import pytest

import sandbox.limits as limits
from sandbox import EgressPolicy, ProcessSpec, ResourceLimits, Sandbox

HOG = "import time\nx = []\nwhile True:\n    x.append(bytearray(20 << 20)); time.sleep(0.02)\n"
FORKS = """
import os, resource, sys, time
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], flush=True)
kids = []
try:
    for _ in range(40):
        pid = os.fork()
        if pid == 0:
            time.sleep(5); os._exit(0)
        kids.append(pid)
    print("forked all", flush=True)
except OSError as e:
    print("fork refused", len(kids), flush=True)
"""


async def _run(tmp_path, python, code, lim):
    sb = await Sandbox.start(EgressPolicy.from_environ({}), tmp_path / "sb")
    try:
        out = tmp_path / "out.txt"
        with open(out, "wb") as f:
            p = sb.spawn(
                ProcessSpec(
                    "hog",
                    [str(python), "-c", code],
                    tmp_path,
                    {"PATH": "/usr/bin"},
                    read_only_paths=[python.parent.parent],
                    stdout_fd=f.fileno(),
                    limits=lim,
                )
            )
        await asyncio.wait_for(p.wait(), 30)
        return p.exit_info(), out.read_text()
    finally:
        await sb.close()


def test_memory_limit_by_cgroup(tmp_path, plain_python):
    if limits.cgroup_mode() == "none":
        pytest.skip("no writable cgroup hierarchy here")
    info, _ = asyncio.run(_run(tmp_path, plain_python, HOG, ResourceLimits(memory_mb=100)))
    assert info.reason == "memory-limit" and "100 MB" in info.detail, (info, _)


def test_memory_limit_by_watcher_without_cgroups(tmp_path, plain_python, monkeypatch):
    monkeypatch.setattr(limits, "_mode", "none")  # what an unprivileged pod sees: cgroupfs read-only
    info, _ = asyncio.run(_run(tmp_path, plain_python, HOG, ResourceLimits(memory_mb=100)))
    assert info.reason == "memory-limit" and "RSS over 100 MB" in info.detail


def test_pids_and_nofile_limits(tmp_path, plain_python):
    if limits.cgroup_mode() == "none":
        pytest.skip("no writable cgroup hierarchy here")
    info, text = asyncio.run(_run(tmp_path, plain_python, FORKS, ResourceLimits(pids=10, nofile=256)))
    lines = text.split("\n")
    assert lines[0] == "256"
    assert lines[1].startswith("fork refused")
    assert os.path.exists("/proc")  # sanity: the test ran on Linux
