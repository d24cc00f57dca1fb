"""A server's Ray variables from the environment's Ray decision (gym_runtime/ray/env.py):
what each mode adds, and the switch for a server run without Ray."""

from __future__ import annotations

from pathlib import Path

from gym_runtime.ray.env import server_ray_env
from gym_runtime.ray.head import LOOPBACK_ENV
from gym_runtime.ray.target import RayTarget

TREE, PY = Path("/pkg/resources_servers/acme"), Path("/venvs/v/bin/python")


def test_each_mode_gives_its_variables_and_a_server_run_without_ray_is_told() -> None:
    local = server_ray_env(RayTarget("local", None, "needed by judge", ("judge",), ("relay",)), "judge", TREE, PY, {})
    assert LOOPBACK_ENV.items() <= local.items() and "GYM_RUNTIME_NO_RAY_DRIVER" not in local
    relay = server_ray_env(RayTarget("local", None, "needed by judge", ("judge",), ("relay",)), "relay", TREE, PY, {})
    assert relay["GYM_RUNTIME_NO_RAY_DRIVER"] == "1" and relay["RAY_ENABLE_AUTO_CONNECT"] == "0"
    none = server_ray_env(RayTarget("none", without=("relay",)), "relay", TREE, PY, {})
    assert none == {"GYM_RUNTIME_NO_RAY_DRIVER": "1", "RAY_ENABLE_AUTO_CONNECT": "0"}
    assert server_ray_env(RayTarget("none"), "judge", TREE, PY, {}) == {}
    own = server_ray_env(RayTarget("own", None, "needed by judge", ("judge",)), "judge", TREE, PY, {})
    assert own["RAY_enable_worker_prestart"] == "0" and "RAY_ADDRESS" not in own
