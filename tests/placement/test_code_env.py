"""The job's ``runtime_env`` ships the runtime's own packages to every node (gym_runtime/placement/cluster.py)."""

from __future__ import annotations

from pathlib import Path

import gym_runtime
import sandbox
from gym_runtime.placement.cluster import code_env


def test_the_job_ships_the_gym_runtime_and_sandbox_packages_without_usage_stats() -> None:
    env = code_env()
    assert env["py_modules"][:2] == [str(Path(gym_runtime.__file__).parent), str(Path(sandbox.__file__).parent)]
    assert env["env_vars"] == {"RAY_USAGE_STATS_ENABLED": "0"}
