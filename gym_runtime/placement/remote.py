"""The driver side of one replica on a Ray node: its launcher and its process handle.

:class:`ReplicaLauncher` plays the role a :class:`sandbox.Sandbox` plays for a local server: the
supervisor calls ``launcher.spawn(spec)`` and supervises the returned
:class:`~gym_runtime.placement.remote_process.RemoteProcess`
exactly like a local process (``poll``, ``returncode``, ``exit_info``, ``mark``, ``wait``,
``stop``, ``kill_now``, ``app_pid``; ``pid`` is None: there is no local process). The launcher
places its replica actor (:mod:`gym_runtime.placement.replica`) the first time and again after
the node was lost (never on a node lost in this run), then starts the server there and points
the replica's stable address at it (:mod:`gym_runtime.placement.addresses`).

Exits are seen at once: the handle waits on the actor's ``wait_exit`` call, which returns when
the server process ends. A lost node shows as that call failing (Ray reports the actor's worker
gone within seconds of its raylet's death) or as two missed heartbeats that the worker's machine
does not answer either (:mod:`gym_runtime.placement.liveness`: within 7 s, with no cluster
setting of ours): the exit is then ``reason="node-lost"``
naming the node, and a new actor is requested at once on a surviving node
(:meth:`ReplicaLauncher.lost`); the instance's router asks :meth:`ReplicaLauncher.lost_since`
to name the node to requests cut by the loss (docs/scale-out.md "Node loss"). A placement that fails (no
node fits, the build fails, the isolation asked for is not there) ends the handle with
``reason="start-failed"`` and the node's error; :meth:`ReplicaLauncher.place` raises it instead
when called directly at start-up. A node lost while a replica is being placed on it (also one
Ray gave it before declaring its loss) is no exit: the placement asks for another node. Any
other failure of a call to Ray ends the handle with ``reason="driver-error"``; the supervisor
restarts it as any exit (a handle never ends without an exit).

While a replica is placed its launcher keeps ``phase``: ``waiting for a node``, ``shipping
package``, then the node's own phases (``building venv: stage 1``...), polled from the actor's
``progress`` every :data:`PROGRESS_S`; ``on_phase(launcher)`` is called at each change (the head
server shows it for the instance, docs/scale-out.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

from gym_runtime.errors import StartError
from gym_runtime.placement.actor import actor_class
from gym_runtime.placement.addresses import ReplicaAddress
from gym_runtime.placement.cluster import RayCluster
from gym_runtime.placement.death import Death, by_kernel, death_of, kernel_oom_on
from gym_runtime.placement.liveness import (
    HEARTBEAT_TIMEOUT_S,
    dead_node,
    lost_errors,
    node_error,
    ray_call,
    while_alive,
)
from gym_runtime.placement.remote_process import RemoteProcess
from gym_runtime.placement.replica import ReplicaJob
from gym_runtime.supervise.member import NODE_LOST, OOM, OOM_CODE, OOM_HINT, WORKER_DIED

LOST = NODE_LOST
PLACE_TIMEOUT_S = 180.0
ROOM_CHECK_S = 5.0  # a replica Ray has not placed by then gets its reason said (ReplicaLauncher._node_for)
VERDICT_WAIT_S = 6.0  # how long a request cut on a replica waits for the loss to be declared (> 4 s)
PROGRESS_S = 0.5
DEATH_READ_S = 3.0  # how long the actor and node tables are read after an actor error (then: the node's loss)
KERNEL_LOG_S = 20.0  # how long a worker's death waits for its node's kernel log (a task's worker may start slowly)


class PackageShipper:
    """The package archive in Ray's object store, made once per run on first need
    (:func:`gym_runtime.placement.package.archive`)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._ref: Any = None
        self._lock = asyncio.Lock()

    async def ref(self) -> Any:
        import ray

        from gym_runtime.placement.package import archive

        async with self._lock:
            if self._ref is None:
                blob, sha = await asyncio.to_thread(archive, Path(self.root))
                self._ref = ray.put((blob, sha))
            return self._ref


class ReplicaLauncher:
    """Where one replica runs (module doc). ``options``: Ray actor options from the instance's
    ``placement`` block (:meth:`gym_runtime.config.placement.Placement.ray_options`);
    ``address``: its started :class:`ReplicaAddress`; ``progress``: a callable for lines;
    ``on_phase``: called with the launcher whenever ``phase`` changes (module doc)."""

    def __init__(
        self,
        cluster: RayCluster,
        job: ReplicaJob,
        options: dict[str, Any],
        address: ReplicaAddress,
        shipper: PackageShipper,
        progress=None,
        on_phase=None,
    ) -> None:
        self.cluster, self.job, self.options, self.address = cluster, job, options, address
        self.shipper = shipper
        self.progress = progress or (lambda msg: None)
        self.on_phase = on_phase or (lambda launcher: None)
        self.actor: Any = None
        self.node_id: str | None = None
        self.facts: dict[str, Any] = {}
        self.phase = "pending"
        self.moves = 0  # times placed again on another node after a node's loss
        self.ended_at = 0.0  # time.monotonic() of the last end of its server (any reason)
        self.loss: dict[str, Any] | None = None  # the last loss: {"at", "node", "node_id"}
        self._placing: asyncio.Task | None = None  # a placement started at once after a loss
        self.spares: Any = None  # the run's warm spares (gym_runtime.placement.spares), once every replica is placed
        self.group: Any = None  # the placement group holding its resources when a spare adopted it

    def _phase(self, what: str) -> None:
        if what != self.phase:
            self.phase = what
            self.on_phase(self)

    @property
    def node(self) -> str | None:
        """``<node address> (<id[:8]>)`` where the replica is placed, or None."""
        return f"{self.facts.get('node_ip')} ({self.node_id[:8]})" if self.node_id else None

    async def place(self) -> dict[str, Any]:
        """Create the actor where Ray finds room, materialise the package and build the venv
        there; returns the node's facts. A node lost before the actor runs there or while it is
        prepared is left out and the replica is requested again on another node, until
        :data:`PLACE_TIMEOUT_S` from the first request (Ray can give a node whose loss its GCS has
        not declared yet: it sends a replica that asks no resources to a node it picks at random
        among those it holds alive, and the actor fails only when that node is declared dead).
        Raises :class:`StartError` naming the server and the node: ``GR-PLACE-INFEASIBLE`` when no
        node takes it in time, ``GR-PLACE-NODE-LOST`` when nodes were lost under it until the
        deadline, ``GR-PLACE-ACTOR`` when its actor fails in its own start or ends before it ran
        without Ray naming a lost node or its worker dies on a node that lives, ``GR-PLACE-OOM`` when
        Ray's memory monitor kills its worker (:mod:`gym_runtime.placement.death`), a node's own
        error code (e.g. ``GR-BUILD-PYTHON``) otherwise."""
        deadline = time.monotonic() + PLACE_TIMEOUT_S
        while True:
            try:
                return await self._place_once(deadline)
            except lost_errors() as e:
                node, dead, ran = self.node, dead_node(e), self.node_id is not None
                death = await self.death(e) if ran and not dead else None
                if death is not None and death.reason != LOST:  # its worker died on a live node
                    self.forget()
                    raise StartError(
                        f"server {self.job.name!r}: {death.detail}, while it was being placed",
                        code=OOM_CODE if death.reason == OOM else "GR-PLACE-ACTOR",
                        cause=str(e),
                        hint=OOM_HINT if death.reason == OOM else None,
                    ) from None
                init_failed = getattr(e, "actor_init_failed", False)
                if init_failed or not (ran or dead):  # nothing to leave out: asking again would end the same
                    self.forget()
                    raise StartError(
                        f"server {self.job.name!r}: its replica actor ended "
                        + ("in its own start" if init_failed else "before it ran, and Ray named no lost node")
                        + f" (node {node or 'not known'})",
                        code="GR-PLACE-ACTOR",
                        cause=str(e),
                    ) from None
                self.forget(lost=True)
                if dead:
                    self.cluster.lost.add(dead)
                    node = node or f"({dead[:8]})"
                if time.monotonic() >= deadline:
                    raise StartError(
                        f"server {self.job.name!r}: its node {node or '(not known)'} was lost while it "
                        "was being placed, "
                        f"and no other node took it within {PLACE_TIMEOUT_S:g}s",
                        code="GR-PLACE-NODE-LOST",
                        cause=str(e),
                    ) from None
                self.progress(
                    f"{self.job.name}: "
                    + (
                        f"node {node} was lost while it was being placed there"
                        if ran
                        else "the node Ray gave it" + (f", {node}," if node else "") + " was lost before it ran there"
                    )
                    + f" ({type(e).__name__}); placing it again on another node"
                )

    async def _place_once(self, deadline: float) -> dict[str, Any]:
        """One try of :meth:`place`: Ray's actor error or :class:`NodeLost` when the node is lost
        (the actor is dropped, not yet ``self.actor`` before it ran)."""
        import ray

        opts = dict(self.options)
        selector = {**opts.pop("label_selector", {}), **self.cluster.exclude_lost()}
        if selector:
            opts["label_selector"] = selector
        self._phase("waiting for a node")
        t0 = time.monotonic()
        spare = await self.spares.take(self.options, selector, self.job) if self.spares is not None else None
        if spare is not None:
            actor, self.group, where = spare
        else:
            actor = actor_class().options(**opts, max_restarts=0, max_task_retries=0).remote(self.job)
            try:
                where = await self._node_for(actor, deadline)
            except BaseException as e:
                with contextlib.suppress(Exception):
                    ray.kill(actor)  # the run stops while the actor waits for a node, or it is gone
                if not isinstance(e, asyncio.TimeoutError):
                    raise
                waits = await asyncio.to_thread(self.cluster.waits_for_room, self.options)
                why = (
                    await asyncio.to_thread(self.cluster.why_no_room, self.options)
                    if waits
                    else "Ray gave it a node, where its worker process did not start"
                )
                raise StartError(
                    f"server {self.job.name!r}: no node of the cluster took it within {PLACE_TIMEOUT_S:g}s: {why}",
                    code="GR-PLACE-INFEASIBLE",
                    cause=f"it asks for {self._asks()}",
                    hint="give the cluster a node with those resources and labels, or lower the "
                    "server's placement block (docs/scale-out.md)",
                ) from None
        self.actor, self.node_id = actor, where["node_id"]
        self.facts = {"node_ip": where["node_ip"]}
        took = {"spare" if spare is not None else "actor": time.monotonic() - t0}
        self._phase("checking package")
        here = await while_alive(actor, ray_call(actor.has_package.remote()))
        if not here:
            self._phase("shipping package")
        shipped = None if here else await self.shipper.ref()
        facts = await while_alive(actor, self._prepare_watched(actor, shipped))
        if "error" in facts:
            node = self.node
            self.forget()
            raise node_error(self.job.name, node, facts["error"])
        self.facts = facts
        self._phase("placed")
        took.update(facts.get("took_s") or {})
        steps = ", ".join(f"{k} {v:.1f}s" for k, v in took.items())
        self.progress(
            f"{self.job.name}: placed on node {self.node} in {time.monotonic() - t0:.1f}s ({steps}): "
            f"package {facts['package']}, venv {'reused' if facts['reused'] else 'built'}, "
            f"isolation {facts['isolation']}"
        )
        return facts

    async def _node_for(self, actor: Any, deadline: float) -> dict[str, Any]:
        """The actor's ``where`` once its worker runs (:class:`asyncio.TimeoutError` at
        ``deadline``, a ``time.monotonic()``; Ray's actor error when it died first). When it does
        not run within :data:`ROOM_CHECK_S`, the phase says
        where it stands: its worker starting on the node Ray gave it, or, while Ray lists it as a
        pending demand (:meth:`RayCluster.waits_for_room`), why it has no node
        (:meth:`RayCluster.why_no_room`), said on a progress line too."""
        call = asyncio.ensure_future(ray_call(actor.where.remote(), max(deadline - time.monotonic(), 0.0)))
        try:
            done, _ = await asyncio.wait({call}, timeout=ROOM_CHECK_S)
            if not done:
                if not await asyncio.to_thread(self.cluster.waits_for_room, self.options):
                    self._phase("starting its worker (Ray gave it a node)")
                else:
                    why = await asyncio.to_thread(self.cluster.why_no_room, self.options)
                    self._phase(f"waiting for a node: {why}")
                    self.progress(
                        f"{self.job.name}: waiting for a node ({ROOM_CHECK_S:g}s so far, up to "
                        f"{PLACE_TIMEOUT_S:g}s): {why}"
                    )
            return await call
        finally:
            if not call.done():
                call.cancel()
                await asyncio.gather(call, return_exceptions=True)

    async def _prepare_watched(self, actor: Any, shipped: Any) -> dict[str, Any]:
        """The actor's ``prepare`` result; meanwhile its ``progress`` is polled into ``phase``."""
        call = asyncio.ensure_future(ray_call(actor.prepare.remote(shipped)))
        try:
            while True:
                await asyncio.wait({call}, timeout=PROGRESS_S)
                if call.done():
                    return call.result()
                with contextlib.suppress(Exception):
                    phases = await ray_call(actor.progress.remote(), HEARTBEAT_TIMEOUT_S)
                    if phases:
                        self._phase(phases[-1][0])
        finally:
            if not call.done():
                call.cancel()
                await asyncio.gather(call, return_exceptions=True)

    def _asks(self) -> str:
        parts = [f"{k}={v}" for k, v in self.options.items()]
        lost = self.cluster.exclude_lost()
        return ", ".join(parts + ([f"not on lost nodes {lost['ray.io/node-id']}"] if lost else [])) or "nothing"

    def lost(self, node: str | None, node_id: str | None) -> None:
        """Its node was lost: remember it, drop the actor and start placing a new one at once on
        a surviving node (the supervisor's restart then finds it placed or on its way)."""
        self.loss = {"at": time.monotonic(), "node": node, "node_id": node_id}
        self.forget(lost=True)
        self.moves += 1
        self._placing = asyncio.get_running_loop().create_task(self.place())
        self._placing.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def placed(self) -> None:
        """Wait for the placement started after a loss, or place now when there is no actor."""
        placing, self._placing = self._placing, None
        if placing is not None:
            await placing
        if self.actor is None:
            await self.place()

    async def death(self, error: BaseException) -> Death:
        """Why its actor ended (``error``: what a call on it raised), from Ray's actor and node
        tables (:func:`gym_runtime.placement.death.death_of`, read within :data:`DEATH_READ_S`, well
        inside the router's :data:`VERDICT_WAIT_S`; past it, the node's loss); a worker dead on a live node is ``oom`` when its node's kernel
        log has the OOM killer's record of it (asked within :data:`KERNEL_LOG_S`)."""
        actor_id = getattr(self.actor, "_actor_id", None)
        node_id, memory = self.node_id, self.options.get("memory")
        try:
            death = await asyncio.wait_for(
                asyncio.to_thread(
                    death_of,
                    actor_id.hex() if actor_id is not None else None,
                    self.node_id,
                    error,
                    self.node,
                    memory,
                ),
                DEATH_READ_S,
            )
        except TimeoutError:
            return Death(LOST, f"node {self.node} was lost: {type(error).__name__}")
        if death.reason == WORKER_DIED and death.pid and node_id:  # the kernel's OOM killer? its node's log says
            record = await asyncio.to_thread(kernel_oom_on, node_id, death.pid, KERNEL_LOG_S)
            death = by_kernel(death, record, self.node, memory if isinstance(memory, int) else None)
        return death

    async def lost_since(self, since: float) -> dict[str, Any] | None:
        """``{"node", "node_id", "at"}`` when its node was declared lost after ``since``
        (``time.monotonic()``), waiting up to :data:`VERDICT_WAIT_S` for its server's end to be
        known (counted from now: the request may have waited long before it was cut); None when
        it ended otherwise or still runs (the router's ``verdict``)."""
        deadline = time.monotonic() + VERDICT_WAIT_S
        while self.ended_at < since and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return self.loss if self.loss is not None and self.loss["at"] >= since else None

    def spawn_after(self, spec: Any) -> None:
        """Nothing to wait for before a spawn (the launcher interface, :meth:`sandbox.Sandbox.spawn_after`)."""
        return None

    def spawn(self, spec: Any) -> RemoteProcess:
        """Start the replica (placing it first when it has no live actor); returns at once.
        ``spec.stdout_fd``: where its log lines go (the supervisor's pipe)."""
        return RemoteProcess(self, spec.stdout_fd)

    def forget(self, lost: bool = False) -> None:
        """Drop the actor (Ray kills it and its server); ``lost`` remembers its node as lost."""
        import ray

        if lost and self.node_id:
            self.cluster.lost.add(self.node_id)
        if self.actor is not None:
            with contextlib.suppress(Exception):
                ray.kill(self.actor)
        if self.group is not None:
            from gym_runtime.placement.spares import Spares

            Spares.release(self.group)
        self.actor, self.node_id, self.group = None, None, None

    async def close(self) -> None:
        """Stop everything of this replica on its node (sandbox included) and drop the actor."""
        if self._placing is not None:
            self._placing.cancel()
            with contextlib.suppress(BaseException):
                await self._placing
            self._placing = None
        if self.actor is not None:
            with contextlib.suppress(Exception):
                await ray_call(self.actor.close.remote(), 10)
        self.forget()
        self.address.point(None)
