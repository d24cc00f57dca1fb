"""The Ray variables of one server on this host, from the environment's Ray decision
(:class:`gym_runtime.ray.target.RayTarget`; docs/runtime.md, "Ray").

* mode ``local``: drivers of the private head agree with it on the loopback node address
  (:data:`gym_runtime.ray.head.LOOPBACK_ENV`);
* mode ``join``: drivers of a joined cluster share this node's own Ray settings
  (:data:`gym_runtime.ray.head.NODE_RAY_ENV`, taken from the daemon's environment);
* both: the server's Ray tasks run in its venv with its ``PYTHONPATH``
  (:func:`gym_runtime.ray.workers.job_env`);
* mode ``own``: a server that uses Ray starts its own cluster in its sandbox
  (:func:`gym_runtime.ray.own.server_env`);
* a server NeMo Gym would give a driver but that calls no Ray (``RayTarget.without``) is told to
  run without one (:func:`gym_runtime.ray.switch.server_env`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gym_runtime.ray import head as ray_head
from gym_runtime.ray import own as own_ray
from gym_runtime.ray import switch as ray_switch
from gym_runtime.ray import workers as ray_workers


def server_ray_env(ray: Any, name: str, tree: Path, python: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """Variables for server ``name`` (its tree ``tree``, its venv's ``python``) under ``ray``;
    ``environ``: the daemon's environment."""
    out: dict[str, str] = {}
    if ray.mode == "local":
        out.update(ray_head.LOOPBACK_ENV)
    elif ray.mode == "join":
        out.update({k: environ[k] for k in ray_head.NODE_RAY_ENV if k in environ})
    if ray.mode in ("local", "join"):
        out.update(ray_workers.job_env(tree, python))
    elif ray.mode == "own" and name in ray.needed_by:
        out.update(own_ray.server_env())
    if name in ray.without:
        out.update(ray_switch.server_env())
    return out
