"""Ray mode ``own``: each server that uses Ray starts its own cluster inside its sandbox (the
``opensandbox`` backend, whose sandboxes share no network; :mod:`gym_runtime.ray.target`,
docs/runtime.md "Sandbox backends").

The contract is NeMo Gym's: ``run_webserver`` calls ``initialize_ray()`` (0.7.0
``nemo_gym/server_utils.py``) unless the server's class says ``ray_enabled = False``; with no
``ray_head_node_address`` in the global config it calls ``ray.init()`` without an address, which
starts a new cluster in the server's own process tree (GCS, raylet, dashboard and its agents, log
monitor; Ray's temp dir ``/tmp/ray``, the sandbox's own), prints ``NeMo Gym is starting a new Ray
cluster...`` and, at exit, shuts it down (``maybe_ray_cluster_exit``, registered with ``atexit``).
The daemon starts no Ray and gives no address: the server's config carries no
``ray_head_node_address`` (:func:`gym_runtime.supervise.contract.config_view`) and its environment
none of the private head's settings (loopback node address, the job's runtime environment).

What the server does get: :func:`server_env` (Ray's usage stats off and sent nowhere; no idle
worker started ahead of a task, saving one Python worker per CPU; no warning about the
container's CPU count, which Ray reads from the sandbox's cgroup) and at least
:data:`MEMORY_MB` of memory (:func:`raised_limits`), since its Ray runs inside the same limit.
Ray's object store wants ``/dev/shm``; a container's is 64 MiB by default, below Ray's 75 MiB
minimum, so the store is a file under ``/tmp/ray`` (Ray's warning "The object store is using
/tmp/ray instead of /dev/shm" in the server's log): slower for large objects, which Gym servers
do not pass.
"""

from __future__ import annotations

from typing import Any

from gym_runtime.ray.head import NO_PRESTART, PROMPT_STORE, USAGE_STATS_OFF

# The least memory (MiB) a sandbox whose server starts its own Ray gets: measured on NeMo Gym
# 0.7.0's servers in the test image (docs/runtime.md, "Sandbox backends"), with room for the
# server's own requests.
MEMORY_MB = 2048


def server_env() -> dict[str, str]:
    """Variables for a server that starts its own Ray (module doc); none names an address."""
    return {**USAGE_STATS_OFF, **NO_PRESTART, **PROMPT_STORE, "RAY_DISABLE_DOCKER_CPU_WARNING": "1"}


def raised_limits(target: Any, memory_mb: int | None) -> dict[str, tuple[int, int]]:
    """Server -> ``(memory_mb, MEMORY_MB)`` for each server of ``target`` (a
    :class:`~gym_runtime.ray.target.RayTarget`) whose memory limit :data:`MEMORY_MB` raises: only
    in mode ``own``, for the servers that use Ray, and only when a limit below it is set (None or 0:
    no limit, left so)."""
    if target.mode != "own" or not memory_mb or memory_mb >= MEMORY_MB:
        return {}
    return dict.fromkeys(target.needed_by, (memory_mb, MEMORY_MB))


def load_bound_start(ray: Any, name: str) -> bool:
    """Whether server ``name``'s start-up waits on Ray's fixed 30 s window for its own raylet to
    register (``ray/_private/node.py``: "The current node timed out during startup"), which a
    loaded host can miss the same way twice and then meet: then the start-up exit rule gives it
    every restart, as for the private head (:attr:`gym_runtime.supervise.member.Member.load_bound_start`).
    ``ray``: the run's :class:`~gym_runtime.ray.target.RayTarget`."""
    return ray.mode == "own" and name in ray.needed_by
