"""Warm spare workers: a replica placed again after a node's loss starts without a new Ray worker.

Most of a move's time on a busy node was Ray starting the new actor's worker process (a Python
process importing Ray and the runtime's modules: about 1 CPU-second with bytecode, 2.3 without,
which a node whose cores are taken by other work stretches to 5-20 s). So once every replica is
placed, the driver keeps idle :class:`~gym_runtime.placement.replica.ServerReplica` actors on every
live node (no job yet, no resources, pinned to the node with Ray's
``NodeAffinitySchedulingStrategy``) that have imported what a placement needs: as many per node as
the loss of the node hosting most replicas moves to each other node (:func:`per_node`), since the
loss waits for its slowest move and one replica left to start a new worker is that move.

After a loss, :meth:`Spares.take` lets Ray choose the node as before, by a placement group of one
bundle holding the replica's own resources and label selector (Ray reserves them on a node that
fits; no worker process starts for a placement group), and hands the replica to one of that node's
spares (:meth:`ServerReplica.adopt`). The group names the node with the most spares no other move
in flight asked for as Ray's soft target (``_soft_target_node_id``, a hint Ray drops when that node
has no room or does not match), so concurrent moves spread over the spares. The group lives as
long as the replica (:meth:`Spares.release`). A replica that asks for GPUs (Ray sets its devices
only for a worker leased with them), a group Ray cannot place within :data:`GROUP_WAIT_S`, or a
node without a ready spare takes the usual path: a new actor where Ray finds room.

:meth:`Spares.keep` counts the spares every :data:`REFILL_S` (skipping a turn within that time of
a move, whose own work goes first): a used spare is replaced, a node that joined gets its spares,
and the count follows the replicas as they move. Cost: up to :data:`MAX_PER_NODE` idle workers per
node (docs/scale-out.md "Node loss").
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from gym_runtime.placement.actor import actor_class
from gym_runtime.placement.liveness import lost_errors, ray_call

GROUP_WAIT_S = 2.0  # how long a placement group may take to be placed before the usual path is taken
ADOPT_S = 30.0  # how long a spare may take to adopt a replica
REFILL_S = 10.0  # the spares are counted and replaced this often, never this soon after a move
MAX_PER_NODE = 4  # spares a node keeps at most (an idle Ray worker each)


def warm() -> None:
    """In a spare, import what a placement's steps import (package, venv plan and build, sandbox,
    the server's contract), so the replica it adopts finds them loaded. ``gym_runtime.venvs`` loads
    its parts on first use, so they are named here (without them, the first venv check of an
    adopted replica imported 43 modules: 0.08 of its 0.09 CPU-seconds, on the move's critical path)."""
    import importlib

    for name in (
        "gym_runtime.config.instances",
        "gym_runtime.config.token_capture",
        "gym_runtime.package",
        "gym_runtime.placement.package",
        "gym_runtime.ray.env",
        "gym_runtime.ray.switch",
        "gym_runtime.ray.use",
        "gym_runtime.supervise.contract",
        "gym_runtime.supervise.env_limit",
        "gym_runtime.supervise.orphans",
        "gym_runtime.venvs.build",
        "gym_runtime.venvs.plan",
        "sandbox",
    ):
        importlib.import_module(name)


def bundle_of(options: dict[str, Any]) -> dict[str, float]:
    """The Ray resources a replica's actor ``options`` ask, as a placement group bundle
    (``CPU``, ``memory``, custom ones; zero entries left out)."""
    out = {"CPU": options.get("num_cpus") or 0, "memory": options.get("memory") or 0}
    out.update(options.get("resources") or {})
    return {k: float(v) for k, v in out.items() if v}


def per_node(hosts: Iterable[str | None], live: int) -> int:
    """Spares each live node keeps: the replicas on the node hosting most of them (``hosts``: the
    node id of each replica a spare can take, None for one not placed), shared over the ``live``
    nodes' others, rounded up; at least 1, at most :data:`MAX_PER_NODE`."""
    most = max(Counter(h for h in hosts if h is not None).values(), default=0)
    return max(1, min(MAX_PER_NODE, math.ceil(most / max(live - 1, 1))))


class Spares:
    """Warm spares on every live node (module doc). ``cluster``: the joined
    :class:`~gym_runtime.placement.cluster.RayCluster`; ``hosts``: the node ids of the replicas a
    spare can take, as they stand (:func:`per_node`)."""

    def __init__(self, cluster: Any, hosts: Callable[[], Iterable[str | None]] = list) -> None:
        self.cluster = cluster
        self.hosts = hosts
        self.ready: dict[str, list[Any]] = {}  # node id -> its spare actors that answered
        self._starting: Counter[str] = Counter()  # node id -> spares starting there
        self._claimed: Counter[str] = Counter()  # node id -> moves in flight that asked Ray for it (take)
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self._moved_at = 0.0  # time.monotonic() of the last take

    def count(self) -> int:
        """Spares ready, on every node."""
        return sum(len(a) for a in self.ready.values())

    def fill(self, delay_s: float = 0.0) -> None:
        """Start spares on every live node that was not lost, up to :func:`per_node` each, after ``delay_s``."""
        if not self._closed:
            task = asyncio.get_running_loop().create_task(self._fill(delay_s))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def keep(self) -> None:
        """:meth:`fill` now and every :data:`REFILL_S` until :meth:`close`, skipping a turn within
        :data:`REFILL_S` of a move (module doc)."""
        if not self._closed:
            task = asyncio.get_running_loop().create_task(self._keep())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _keep(self) -> None:
        while True:
            if time.monotonic() - self._moved_at >= REFILL_S:
                self.fill()
            await asyncio.sleep(REFILL_S)

    async def _fill(self, delay_s: float) -> None:
        import ray

        await asyncio.sleep(delay_s)
        nodes = await asyncio.to_thread(ray.nodes)
        live = [n["NodeID"] for n in nodes if n.get("Alive") and n["NodeID"] not in self.cluster.lost]
        each = per_node(self.hosts(), len(live))
        want = [n for n in live for _ in range(each - len(self.ready.get(n, ())) - self._starting[n])]
        await asyncio.gather(*(self._start(node_id) for node_id in want))

    async def _start(self, node_id: str) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._starting[node_id] += 1
        try:
            actor = (
                actor_class()
                .options(
                    num_cpus=0,
                    max_restarts=0,
                    max_task_retries=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                )
                .remote(None, warm)
            )
            try:
                await ray_call(actor.where.remote(), 120)
            except BaseException as e:  # a node without a spare takes the usual path
                with contextlib.suppress(Exception):
                    ray.kill(actor)
                if not isinstance(e, Exception):
                    raise
                return
            if self._closed or node_id in self.cluster.lost:
                ray.kill(actor)
            else:
                self.ready.setdefault(node_id, []).append(actor)
        finally:
            self._starting[node_id] -= 1

    async def take(self, options: dict[str, Any], selector: dict[str, str], job: Any) -> tuple[Any, Any, dict] | None:
        """A spare that adopted ``job`` on a node Ray chose for ``options`` (the replica's actor
        options) and ``selector`` (its label selector, lost nodes left out):
        ``(actor, placement group, where)``, or None (module doc: then the usual path)."""
        import ray
        from ray.util import placement_group, remove_placement_group
        from ray.util.placement_group import placement_group_table

        for node_id in self.cluster.lost:
            self.ready.pop(node_id, None)
        bundle = bundle_of(options)
        if options.get("num_gpus") or not bundle or not self.count():
            return None
        # the node with the most spares no other move is asking for: Ray's soft hint
        target = max(self.ready, key=lambda n: len(self.ready[n]) - self._claimed[n])
        self._claimed[target] += 1
        pg = placement_group(
            [bundle],
            strategy="STRICT_PACK",
            bundle_label_selector=[selector] if selector else None,
            _soft_target_node_id=target,
        )
        spare = None
        try:
            try:
                await ray_call(pg.ready(), GROUP_WAIT_S)
                node_id = (await asyncio.to_thread(placement_group_table, pg))["bundles_to_node_id"][0]
            except Exception:  # noqa: BLE001 - not placed in time (no room, a busy GCS): the usual path
                remove_placement_group(pg)
                return None
            spare = self.ready[node_id].pop() if self.ready.get(node_id) else None
            if spare is None:
                remove_placement_group(pg)
                return None
            self._moved_at = time.monotonic()
            where = await ray_call(spare.adopt.remote(job), ADOPT_S)
            return spare, pg, where
        except BaseException as e:  # the spare is gone (its node too, or it hung), or the run stops
            with contextlib.suppress(Exception):
                if spare is not None:
                    ray.kill(spare)
                remove_placement_group(pg)
            if isinstance(e, (TimeoutError, *lost_errors())):
                return None
            raise
        finally:
            self._claimed[target] -= 1

    @staticmethod
    def release(pg: Any) -> None:
        """Give back a replica's placement group (its actor was dropped)."""
        from ray.util import remove_placement_group

        if pg is not None:
            with contextlib.suppress(Exception):
                remove_placement_group(pg)

    def close(self) -> None:
        """End every spare (also those still starting: :meth:`_start` ends them when they answer)."""
        import ray

        self._closed = True
        for task in self._tasks:
            task.cancel()
        for actors in self.ready.values():
            for actor in actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor)
        self.ready.clear()
