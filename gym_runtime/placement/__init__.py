"""Where server instances run: this host, or nodes of a Ray cluster (docs/scale-out.md).

The bring-up (:mod:`gym_runtime.runtime.bringup`) has one seam for it, a placement with two
implementations: :class:`~gym_runtime.placement.local.LocalPlacement` (``local``, the default)
and :class:`~gym_runtime.placement.on_ray.RayPlacement` (``ray``). Both answer the same calls:
``prepare(merged)`` (phase "building venvs"), ``open()`` (phase "starting sandbox"),
``add_servers(merged)`` (phase "starting servers": supervised members whose launcher spawns them
where they run), ``public()`` / ``servers()`` / ``isolation`` (what the head server and the ready
line report), ``replica_nodes()`` (instance -> {replica: node}, for the rollouts' per-replica
counts), ``local_venvs()`` (the venvs built on this host), ``sandboxes()`` (process accounting), ``close()``, ``close_step`` (its teardown
step: name, deadline in s) and ``open_handles()`` (teardown).

The Ray implementation's parts:

* :mod:`~gym_runtime.placement.cluster`: the daemon as the Ray driver owning every replica actor;
* :mod:`~gym_runtime.placement.replica`: the actor on a node (package, venv, sandbox, server);
* :mod:`~gym_runtime.placement.actor`: that actor's Ray class, with its heartbeat's concurrency group;
* :mod:`~gym_runtime.placement.remote`: the driver side of one replica (launcher and handle the
  supervisor drives like a local process);
* :mod:`~gym_runtime.placement.spares`: a warm spare per node, handed a replica moved after a
  node's loss;
* :mod:`~gym_runtime.placement.package`: the package on a node, in place or shipped and verified;
* :mod:`~gym_runtime.placement.addresses`, :mod:`~gym_runtime.placement.router`: the stable
  addresses on the daemon's node.
"""

from __future__ import annotations

from typing import Any

from gym_runtime.errors import UsageError

KINDS = ("local", "ray")


def make_placement(kind: str, env: Any) -> Any:
    """The placement ``kind`` (``local`` or ``ray``) for the environment ``env``; raises
    :class:`UsageError` for another value."""
    if kind == "local":
        from gym_runtime.placement.local import LocalPlacement

        return LocalPlacement(env)
    if kind == "ray":
        from gym_runtime.placement.on_ray import RayPlacement

        return RayPlacement(env)
    raise UsageError(
        f"placement {kind!r} is not one of {', '.join(KINDS)}",
        code="GR-USAGE-PLACEMENT",
        hint="use --placement local (this host) or --placement ray (nodes of --ray-address)",
    )
