"""``gym-runtime prune``: ``uv cache prune`` under the cache's maintenance lock (case C18), real uv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gym_runtime.venvs.store import cache_lock


def _prune(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GYM_RUNTIME_HOME": str(tmp / "home"), "GYM_RUNTIME_UV_CACHE_DIR": str(tmp / "uv")}
    return subprocess.run([sys.executable, "-m", "gym_runtime.cli.main", "prune", *args], capture_output=True,
                          text=True, env=env, timeout=120)


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
