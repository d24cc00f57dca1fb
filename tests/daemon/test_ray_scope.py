"""The Ray target within each sandbox backend's ``ray_scope`` (docs/runtime.md, "Sandbox backends"):
under ``local`` servers share one cluster (the private head, or a joined one); under
``opensandbox`` each server that uses Ray starts its own in its sandbox (mode ``own``), as NeMo
Gym's ``initialize_ray`` does without ``ray_head_node_address``, and a cluster to join is refused
with ``GR-OSB-RAY`` before anything is built. No Ray and no OpenSandbox server run here: these are
the decisions; ``tests/opensandbox/test_own_ray.py`` runs them."""

from __future__ import annotations

import pytest

from gym_runtime.errors import EXIT_INVALID, GymRuntimeError
from gym_runtime.ray import head as ray_head
from gym_runtime.ray import own as own_ray
from gym_runtime.ray import workers as ray_workers
from gym_runtime.ray.target import check_given, choose, ray_level
from gym_runtime.supervise.contract import config_view
from sandbox.backends import LocalBackend, ray_scope
from sandbox.opensandbox.backend import OpenSandboxBackend

SERVER = OpenSandboxBackend.ray_scope


def test_each_backend_names_its_scope() -> None:
    assert ray_scope("local") == LocalBackend.ray_scope == "environment"
    assert ray_scope("opensandbox") == SERVER == "server"


def test_under_opensandbox_each_server_that_uses_ray_gets_its_own() -> None:
    t = choose(None, None, {}, ["env_server", "judge"], SERVER)
    assert (t.mode, t.address, t.needed_by) == ("own", None, ("env_server", "judge"))
    assert "starts its own in its sandbox" in t.describe() and "env_server, judge" in t.describe()
    assert choose(None, None, {}, [], SERVER).mode == "none"  # nobody uses Ray: nothing at all
    assert choose("local", None, {}, ["a"], SERVER).mode == "own"  # a private instance there is the server's own
    assert choose(None, None, {}, ["a"], LocalBackend.ray_scope).mode == "local"  # the local backend: unchanged


@pytest.mark.parametrize(
    ("flag", "config", "environ", "source"),
    [
        ("10.0.0.5:6379", None, {}, "--ray-address=10.0.0.5:6379"),
        (None, "10.0.0.5:6379", {}, "config ray_head_node_address=10.0.0.5:6379"),
        (None, None, {"RAY_ADDRESS": "auto"}, "RAY_ADDRESS=auto"),
    ],
)
def test_a_cluster_to_join_is_refused_under_opensandbox(flag, config, environ, source: str) -> None:
    for call in (
        lambda: check_given(flag, config, environ, SERVER),  # before the build
        lambda: choose(flag, config, environ, ["env_server"], SERVER),
    ):  # once the users are known
        with pytest.raises(GymRuntimeError) as e:
            call()
        err = e.value
        assert err.code == "GR-OSB-RAY" and err.exit_code == EXIT_INVALID
        assert source in err.message and "no node of it" in err.message
        assert f"unset {source.split('=')[0]}" in err.hint and "--sandbox-backend local" in err.hint
    assert "(env_server uses Ray)" in err.message  # choose names the server
    check_given(flag, config, environ, LocalBackend.ray_scope)  # the local backend joins it


def test_own_mode_keeps_the_isolation_asked_for() -> None:
    t = choose(None, None, {}, ["a"], SERVER)
    assert ray_level(t, None, True) is None and ray_level(t, "full", True) == "full"


def test_a_server_with_its_own_ray_gets_no_address_and_none_of_the_private_heads_settings() -> None:
    view = config_view({"ray_head_node_address": "10.0.0.5:6379", "a": {}}, {}, ("127.0.0.1", 9), None)
    assert "ray_head_node_address" not in view  # ray_inside is None in mode own (placement/local.py)
    env = own_ray.server_env()
    assert not {"RAY_ADDRESS", *ray_head.LOOPBACK_ENV, *ray_head.NODE_RAY_ENV, ray_workers.JOB_CONFIG_VAR} & set(env)
    assert env["RAY_enable_worker_prestart"] == "0" and env["RAY_USAGE_STATS_ENABLED"] == "0"


def test_its_sandbox_gets_the_memory_its_ray_needs() -> None:
    t = choose(None, None, {}, ["a"], SERVER)
    assert own_ray.raised_limits(t, 512) == {"a": (512, own_ray.MEMORY_MB)}
    assert own_ray.raised_limits(t, own_ray.MEMORY_MB + 1) == {}  # more already
    assert own_ray.raised_limits(t, 0) == {} and own_ray.raised_limits(t, None) == {}  # no limit stays none
    assert own_ray.raised_limits(choose(None, None, {}, ["a"]), 512) == {}  # the local backend: the operator's limit


def test_a_server_starting_its_own_ray_gets_every_restart_of_a_load_bound_start() -> None:
    """Ray's 30 s window for its raylet to register is missed the same way on a loaded host."""
    t = choose(None, None, {}, ["env_server"], SERVER)
    assert own_ray.load_bound_start(t, "env_server") and not own_ray.load_bound_start(t, "agent")
    assert not own_ray.load_bound_start(choose(None, None, {}, ["env_server"]), "env_server")  # the private head's
