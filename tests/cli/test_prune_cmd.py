"""``gym-runtime prune``: ``uv cache prune`` under the cache's maintenance lock (case C18), real uv."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

from gym_runtime.venvs.store import cache_lock


def _prune(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GYM_RUNTIME_HOME": str(tmp / "home"), "GYM_RUNTIME_UV_CACHE_DIR": str(tmp / "uv")}
    return subprocess.run(
        [sys.executable, "-m", "gym_runtime.cli.main", "prune", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_prune_runs_uv_cache_prune(tmp_path: Path) -> None:
    r = _prune(tmp_path, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"pruned": True, "uv_cache": str(tmp_path / "uv")}
    log = (tmp_path / "home" / "logs" / "build" / "cache-maintenance.log").read_text()
    assert "cache prune" in log


def test_prune_waits_for_a_running_build_then_gives_up_naming_the_lock(tmp_path: Path) -> None:
    with cache_lock(tmp_path / "uv") as got:  # what a build holds while it installs
        assert got
        r = _prune(tmp_path, "--wait", "0.5")
    assert r.returncode == 3 and r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr.startswith("error[GR-BUILD-CACHE-BUSY]") and ".gym-runtime-maintenance.lock" in r.stderr
    assert "--wait" in r.stderr
    assert _prune(tmp_path).returncode == 0  # once the build is done


def test_another_uv_process_holding_the_cache_is_named_with_the_way_out(tmp_path: Path) -> None:
    """Bug: under `./uvw run gym-runtime prune` (the README's way), the `uv run` parent holds uv's own
    lock on the cache, so the inner `uv cache prune` waited 300 s on its own parent and failed as
    GR-BUILD-CACHE-PRUNE. uv now waits at most --wait and the error names the holder and the fix."""
    uv_cache = tmp_path / "uv"
    uv_cache.mkdir()
    fd = os.open(uv_cache / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # what a running `uv run` holds on its cache
        r = _prune(tmp_path, "--wait", "2")
    finally:
        os.close(fd)
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert r.stderr.startswith("error[GR-BUILD-CACHE-BUSY]") and "waiting for lock" in r.stderr
    assert ".venv/bin/gym-runtime prune" in r.stderr
    assert _prune(tmp_path).returncode == 0  # once the other uv process is gone
