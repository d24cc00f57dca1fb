"""The daemon as the Ray driver that owns every replica actor (docs/scale-out.md).

:func:`connect` joins the cluster chosen by :mod:`gym_runtime.ray.target` (``--ray-address``,
``ray_head_node_address``, ``RAY_ADDRESS``) with ``ray.init`` on a worker thread (on the main
thread Ray would replace the daemon's SIGTERM handler). A process that is already a driver (the
Python API inside a training job's driver) is reused and never shut down by us. Ray refuses a
cluster started by another Ray or Python version; that refusal is reported before anything is
placed as ``GR-PLACE-RAY-VERSION`` naming both versions.

Ray needs a raylet on the driver's host: the daemon runs on a node of the cluster (the head or
any worker), which is how a training job's driver runs anyway.

When the daemon connects, the runtime's own code (``gym_runtime``, ``sandbox`` and the built-in
``servers``) travels to the nodes as the job's ``runtime_env`` (``py_modules``: Ray uploads it
once, content-hashed), so nodes run exactly the daemon's code; the nodes' Python needs the
runtime's dependencies (``gym-runtime`` installed in the cluster's image does it). A driver that
was already connected keeps its own ``runtime_env``: its nodes need the same gym-runtime.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_runtime.errors import StartError

NAMESPACE = "gym-runtime"


@dataclass
class RayCluster:
    """A joined cluster: ``address`` (GCS ``host:port``), ``node_ip`` (this node's address, where
    the stable addresses listen), ``node_id`` (the driver's node), ``owned`` (we called
    ``ray.init`` and shut it down), ``lost`` (ids of nodes whose replicas were lost this run)."""

    address: str
    node_ip: str
    node_id: str
    owned: bool
    lost: set[str] = field(default_factory=set)

    def exclude_lost(self) -> dict[str, str]:
        """A label selector keeping new replicas off nodes lost in this run (Ray's default
        ``ray.io/node-id`` label), or ``{}``."""
        if not self.lost:
            return {}
        return {"ray.io/node-id": "!in(" + ",".join(sorted(self.lost)) + ")"}

    def node_of(self, node_id: str) -> str:
        """``<address> (<id[:8]>)`` of a node, for messages."""
        import ray

        for n in ray.nodes():
            if n.get("NodeID") == node_id:
                return f"{n.get('NodeManagerAddress')} ({node_id[:8]})"
        return f"({node_id[:8]})"

    def waits_for_room(self, options: dict[str, Any]) -> bool:
        """True when Ray lists a pending task or actor demand of exactly the shape ``options``
        asks (its Ray actor options): the replica has no node yet and waits for room; False when
        no such demand is pending (Ray gave it a node and its worker process is starting). Read
        from the GCS's cluster status (``ray.autoscaler.v2.sdk.get_cluster_status``, what ``ray
        status`` prints; needs no dashboard); True when it cannot be read (the reason is then
        given from the resources). Blocking: call from a worker thread."""
        from ray.autoscaler.v2.sdk import get_cluster_status

        want = {k: float(v) for k, v in _asks(options).items() if v}
        try:
            demands = get_cluster_status(self.address, timeout=5).resource_demands.ray_task_actor_demand
        except Exception:  # noqa: BLE001 - a reason to give, never a failure of the placement
            return True
        return any({k: float(v) for k, v in b.bundle.items() if v} == want for d in demands for b in d.bundles_by_count)

    def why_no_room(self, options: dict[str, Any]) -> str:
        """Why Ray has given no node to a replica asking ``options`` (the instance's Ray actor
        options: ``num_cpus``, ``num_gpus``, ``memory``, ``resources``, ``label_selector``), from
        Ray's public view of the cluster (``ray.cluster_resources``, ``ray.available_resources``,
        ``ray.nodes``): the asked resources the live nodes lack in all (free of total), with how
        many nodes are live and which were lost this run; else that they have room in all (Ray's
        public view has no per-node free figures), so no single node has it (with the labels
        asked). Blocking: call from a worker thread."""
        import ray

        asks = _asks(options)
        total, free = ray.cluster_resources(), ray.available_resources()
        live = sum(1 for n in ray.nodes() if n.get("Alive"))
        nodes = f"{live} live node(s)" + (
            f"; lost this run: {', '.join(self.node_of(i) for i in sorted(self.lost))}" if self.lost else ""
        )
        short = [
            f"{k} {v:g} (free {free.get(k, 0):g} of {total.get(k, 0):g})"
            for k, v in asks.items()
            if v and free.get(k, 0) < v
        ]
        if short:
            return f"no node has room: it asks {', '.join(short)} on {nodes}"
        room = ", ".join(f"{k} {free.get(k, 0):g} free of {total.get(k, 0):g}" for k, v in asks.items() if v)
        labels = options.get("label_selector")
        return (
            f"the live nodes have room in all ({room or 'it asks no resources'}; {nodes}), but no single node "
            "has it" + (f" with the labels {labels}" if labels else "")
        )

    def shutdown(self) -> None:
        """Disconnect if we connected (Ray then kills every actor we own)."""
        import ray

        if self.owned and ray.is_initialized():
            ray.shutdown()


def _asks(options: dict[str, Any]) -> dict[str, float]:
    """Ray actor options as Ray's resource names: ``CPU``, ``GPU``, ``memory`` and custom ones."""
    return {
        "CPU": options.get("num_cpus") or 0,
        "GPU": options.get("num_gpus") or 0,
        "memory": options.get("memory") or 0,
        **(options.get("resources") or {}),
    }


def code_env() -> dict[str, Any]:
    """The job's ``runtime_env``: the runtime's own modules (module doc), no usage stats."""
    import sandbox
    from gym_runtime.settings import builtin_servers_dir

    roots = [Path(__file__).parents[1], Path(sandbox.__file__).parent]  # gym_runtime/, sandbox/
    if builtin_servers_dir().is_dir():
        roots.append(builtin_servers_dir())
    return {"py_modules": [str(r) for r in roots], "env_vars": {"RAY_USAGE_STATS_ENABLED": "0"}}


def _driver_switches() -> None:
    """Ray switches for a driver that is a long-running daemon with its own signal handling.

    * ``RAY_DISABLE_FAILURE_SIGNAL_HANDLER=1``: Ray's core worker otherwise installs a failure
      handler for SIGTERM in the driver, which logs a stack and ends the process after the
      daemon's own handler began its orderly stop (SIGABRT instead of exit 0).
    * ``RAY_ENABLE_UV_RUN_RUNTIME_ENV`` off: a driver started under ``uv run`` (``uv run
      gym-runtime up ...``) otherwise makes Ray upload the daemon's working directory to every
      node and start workers with ``uv run`` there; the replica actors need only the runtime's own
      modules (:func:`code_env`). Ray reads this switch when it is imported, so its constant is set
      too."""
    os.environ["RAY_DISABLE_FAILURE_SIGNAL_HANDLER"] = "1"  # read when Ray is imported: before any import
    os.environ["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"
    import ray._private.ray_constants as ray_constants

    ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False


def connect(address: str, source: str) -> RayCluster:
    """Join the cluster at ``address`` (blocking: call from a worker thread). Raises
    :class:`StartError` ``GR-PLACE-RAY-VERSION`` (Ray or Python version differs from the
    cluster's) or ``GR-PLACE-RAY-CONNECT`` (anything else ``ray.init`` refuses)."""
    import sys

    if "ray" not in sys.modules:
        _driver_switches()
    import ray

    owned = not ray.is_initialized()
    if owned:
        _driver_switches()
        quiet = logging.getLogger("ray._private.worker")  # "SIGTERM handler is not set": the daemon has its own
        was, quiet.disabled = quiet.disabled, True
        try:
            ray.init(
                address=address,
                namespace=NAMESPACE,
                runtime_env=code_env(),
                log_to_driver=False,
                logging_level=logging.WARNING,
                configure_logging=False,
            )
        except RuntimeError as e:
            text = str(e)
            if text.startswith("Version mismatch"):
                raise StartError(
                    f"ray: the cluster at {address} (from {source}) runs another Ray or Python version "
                    "than this runtime; nothing was placed",
                    code="GR-PLACE-RAY-VERSION",
                    cause=text.replace("Version mismatch: ", "").strip(),
                    hint="run gym-runtime with the cluster's Ray and Python versions (the same image "
                    "as the cluster), or pin GYM_RUNTIME_PIN_RAY and install that Ray",
                ) from None
            raise StartError(
                f"ray: cannot join the cluster at {address} (from {source}): {text}",
                code="GR-PLACE-RAY-CONNECT",
                hint="gym-runtime must run on a node of the cluster (a Ray driver needs a raylet on its host)",
            ) from None
        except ConnectionError as e:
            raise StartError(
                f"ray: cannot join the cluster at {address} (from {source}): {e}",
                code="GR-PLACE-RAY-CONNECT",
                hint="gym-runtime must run on a node of the cluster (a Ray driver needs a raylet on its host)",
            ) from None
        finally:
            quiet.disabled = was
    ctx = ray.get_runtime_context()
    return RayCluster(ctx.gcs_address, ray.util.get_node_ip_address(), ctx.get_node_id(), owned)
