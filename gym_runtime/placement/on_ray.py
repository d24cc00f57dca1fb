"""Placement ``ray``: every server instance as replicas on nodes of a Ray cluster (docs/scale-out.md).

The bring-up calls the same three stages on it as on :class:`~gym_runtime.placement.local.LocalPlacement`:

* :meth:`RayPlacement.prepare` (phase "building venvs"): join the cluster, open the stable
  addresses on this node (a forward per replica, a router per agent and per instance with
  several replicas, one for the head server), and place every replica: Ray picks the node from the instance's
  ``placement`` block, the node materialises the package and builds the venv. The first error
  (a node without the Python, a failed build, no node that fits) stops the start, naming the
  server and the node;
* :meth:`RayPlacement.open` (phase "starting sandbox"): nothing left to do (each node started
  its sandbox while being prepared);
* :meth:`RayPlacement.add_servers` (phase "starting servers"): one supervised member per
  replica, its launcher a :class:`~gym_runtime.placement.remote.ReplicaLauncher`.

:meth:`RayPlacement.replica_nodes` tells the rollouts which replicas an instance has and where
(the per-replica counts of ``/rollouts/run`` and the dry-run, docs/rollouts.md).

:meth:`RayPlacement.close` drops every actor and stable address and leaves the cluster when the
daemon joined it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from gym_runtime.errors import StartError

HEAD_NAME = "head server"
# where rows enter: agents, and the environment servers NeMo Gym 0.7's collection sends rows to
ROW_ENTRY_TYPES = ("responses_api_agents", "environment_servers")
ENVIRONMENT_SERVERS = "environment_servers"  # relays rows to an agent's router (Router.keep_relayed_replica)


def replica_names(instance: str, replicas: int) -> list[str]:
    """Member names of an instance's replicas: the instance name for one, ``name.0``... for more."""
    return [instance] if replicas == 1 else [f"{instance}.{i}" for i in range(replicas)]


class RayPlacement:
    """Servers on Ray nodes. ``env``: the :class:`~gym_runtime.runtime.bringup.Environment`
    (request, settings, supervisor, egress policy, head address, progress)."""

    kind = "ray"
    close_step = ("placement ray (replica actors, stable addresses)", 10.0)  # teardown step: name, deadline (s)

    def __init__(self, env: Any) -> None:
        self.env = env
        self.cluster: Any = None
        self.launchers: dict[str, Any] = {}  # member name -> ReplicaLauncher
        self.addresses: dict[str, Any] = {}  # member name -> ReplicaAddress
        self.routers: dict[str, Any] = {}  # instance -> Router (agents, several replicas)
        self.stable: dict[str, tuple[str, int]] = {}  # instance -> its one address
        self.head_forward: Any = None
        self.spares: Any = None  # warm spares for moves after a node's loss (gym_runtime.placement.spares)

    def local_venvs(self) -> list[Any]:
        """None on this host: every venv is built on the node its replica runs on."""
        return []

    def sandboxes(self) -> list[Any]:
        """None on this host: every sandbox runs on a node (process accounting)."""
        return []

    def open_handles(self) -> str:
        """What closing waits on, for a stop report."""
        return f"{sum(lz.actor is not None for lz in self.launchers.values())} replica actor(s)"

    # ------------------------------------------------------------------ stages
    async def prepare(self, merged: Any) -> None:
        from gym_runtime.config.placement import default_num_cpus, placement_of
        from gym_runtime.placement.addresses import ReplicaAddress
        from gym_runtime.placement.cluster import connect
        from gym_runtime.placement.package import package_digest
        from gym_runtime.placement.replica import HEAD, free_inside_ports
        from gym_runtime.ray.target import choose, wait_reachable

        env, req = self.env, self.env.req
        target = choose(req.ray_address, merged.data.get("ray_head_node_address"), env.settings.environ, [])
        if target.mode != "join":
            raise StartError(
                "--placement ray needs a Ray cluster to join, and none was given",
                code="GR-PLACE-NO-CLUSTER",
                hint="give its GCS address with --ray-address host:port "
                "(or 'auto' on a node of it), the config's ray_head_node_address, or RAY_ADDRESS",
            )
        assert target.address is not None  # a join always has one
        env.ray, env.ray_inside = target, target.address
        env._say(target.describe())
        await asyncio.to_thread(wait_reachable, target.address, target.source, 30.0)
        self.cluster = cluster = await asyncio.to_thread(connect, target.address, target.source)
        host = cluster.node_ip
        self.head_forward = ReplicaAddress(HEAD_NAME)  # to the head server's listener for servers (read-only routes)
        self.head_forward.point(tuple(env.servers_addr))
        head = await self.head_forward.start(host)
        blocks = {
            n: placement_of(i.config, default_num_cpus(i.server_type, i.server_dir.origin))
            for n, i in merged.instances.items()
        }
        for name, block in blocks.items():
            for member in replica_names(name, block.replicas):
                self.addresses[member] = ReplicaAddress(member)
                await self.addresses[member].start(host)
            self.stable[name] = await self._stable(name, block, merged.instances[name].server_type)
        avoid = {p for _, p in env.egress.endpoints}
        names = [*merged.instances, HEAD]
        inside = dict(zip(names, free_inside_ports(len(names), avoid), strict=True))
        stable = {**self.stable, HEAD: head}
        digest = await asyncio.to_thread(package_digest, merged.package.root)
        await self._place(merged, blocks, inside, stable, digest)

    async def _stable(self, name: str, block: Any, server_type: str) -> tuple[str, int]:
        """The instance's one address: an HTTP router (:mod:`gym_runtime.placement.router`) in
        front of several replicas, and in front of an agent's or an environment server's one replica
        too (rows enter there: a row cut by a node's loss is answered with the node's name, or sent
        once more); any
        other single replica is reached through its TCP forward (no HTTP parse in the daemon for
        the model's and resources servers' traffic)."""
        from gym_runtime.placement.router import Router
        from gym_runtime.supervise.member import READY

        members = replica_names(name, block.replicas)
        addresses = [self.addresses[m] for m in members]
        if block.replicas == 1 and server_type not in ROW_ENTRY_TYPES:
            return addresses[0].address

        def ready_targets() -> list[tuple[str, int] | None]:
            """Where each replica answers, only once its readiness probe passed: a replica placed
            again has an address before its server listens."""
            table = self.env.supervisor.members
            return [
                a.target if getattr(table.get(m), "status", None) == READY else None
                for m, a in zip(members, addresses, strict=True)
            ]

        async def verdict(replica: int, since: float) -> dict[str, Any] | None:
            return await self.launchers[members[replica]].lost_since(since)

        router = self.routers[name] = Router(
            name,
            ready_targets,
            verdict=verdict,
            retry_paths=block.retry_paths(),
            keep_relayed_replica=server_type == ENVIRONMENT_SERVERS,
        )
        return await router.start(self.cluster.node_ip)

    async def _place(
        self,
        merged: Any,
        blocks: dict[str, Any],
        inside: dict[str, int],
        stable: dict[str, tuple[str, int]],
        digest: str,
    ) -> None:
        from gym_runtime.config import token_capture
        from gym_runtime.placement.remote import PackageShipper, ReplicaLauncher
        from gym_runtime.placement.replica import ReplicaJob, job_settings
        from gym_runtime.supervise import passthrough

        env, req = self.env, self.env.req
        s = env.settings
        shipper = PackageShipper(str(merged.package.root))
        for name, block in blocks.items():
            for i, member in enumerate(replica_names(name, block.replicas)):
                job = ReplicaJob(
                    instance=name,
                    replica=i,
                    name=member,
                    run_id=env.work_dir.name,
                    package_root=str(merged.package.root),
                    package_digest=digest,
                    data=merged.data,
                    secrets=merged.secrets,
                    inside=inside,
                    stable=stable,
                    ray_address=self.cluster.address,
                    policy=env.egress,
                    settings=job_settings(s),
                    python=req.python,
                    isolation=req.isolation,
                    require_full=req.require_isolation,
                    passed={
                        **passthrough.values_for(s, name),
                        **token_capture.passed(merged.data, merged.instances[name].server_type, dict(s.environ)),
                    },
                    release=merged.release,
                )
                self.launchers[member] = ReplicaLauncher(
                    self.cluster, job, block.ray_options(), self.addresses[member], shipper, env._say, self._phase
                )
        env._say(f"placing {len(self.launchers)} replica(s) on the Ray cluster at {self.cluster.address}")
        results = await asyncio.gather(*(lz.place() for lz in self.launchers.values()), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]
        from gym_runtime.placement.spares import Spares

        self.spares = Spares(
            self.cluster, lambda: [lz.node_id for lz in self.launchers.values() if not lz.options.get("num_gpus")]
        )
        for lz in self.launchers.values():
            lz.spares = self.spares
        self.spares.keep()

    def _phase(self, launcher: Any) -> None:
        """A replica's placement phase changed: the instance's state for the head server while it
        has no member yet (``env.build_state``: ``/server_instances``, ``/health``, ``status``), as
        ``<phase> on node <address (id)>``, one ``<member>: ...`` per replica when several."""
        name = launcher.job.instance
        mine = [lz for lz in self.launchers.values() if lz.job.instance == name]

        def one(lz: Any) -> str:
            return f"{lz.phase} on node {lz.node}" if lz.node else lz.phase

        self.env.build_state[name] = (
            one(mine[0])
            if len(mine) == 1 and mine[0].job.name == name
            else "; ".join(f"{lz.job.name}: {one(lz)}" for lz in mine)
        )

    async def open(self) -> None:
        """Nothing left: each node started its sandbox while it was prepared."""

    async def add_servers(self, merged: Any) -> None:
        """One supervised member per replica; its launcher starts it on its node."""
        from sandbox import ProcessSpec

        for member, lz in self.launchers.items():
            inst = merged.instances[lz.job.instance]
            spec = ProcessSpec(
                member,
                ["<venv on its node>/bin/python", inst.entrypoint],
                f"{inst.server_type}/{inst.implementation}",
                {},
            )
            m = self.env._member(
                member,
                "server",
                spec,
                lz,
                None,
                info={
                    "server_type": inst.server_type,
                    "implementation": inst.implementation,
                    "config_path": inst.name,
                    "instance": inst.name,
                    "entrypoint": inst.entrypoint,
                    "placement": "ray",
                },
            )
            m.public = self.addresses[member].address

    # ------------------------------------------------------------------ what the rest of the daemon reads
    def public(self) -> dict[str, tuple[str, int]]:
        """Instance -> its stable address (the head server's config view)."""
        return dict(self.stable)

    def servers(self) -> dict[str, str]:
        """Instance -> ``http://host:port`` of its stable address (the ready line, rollouts)."""
        return {n: f"http://{h}:{p}" for n, (h, p) in self.stable.items()}

    def replica_nodes(self) -> dict[str, dict[str, str | None]]:
        """Instance -> {replica (member name): its node now, ``address (id)``; None while not
        placed}, from the configuration's ``placement:`` blocks (so known before placing)."""
        from gym_runtime.config.placement import placement_of

        merged = self.env.merged
        out: dict[str, dict[str, str | None]] = {}
        for name, inst in merged.instances.items() if merged is not None else ():
            for member in replica_names(name, placement_of(inst.config).replicas):
                lz = self.launchers.get(member)
                out.setdefault(name, {})[member] = lz.node if lz is not None else None
        return out

    @property
    def isolation(self) -> str:
        """The lowest isolation level any replica got."""
        order = ["none", "partial", "full"]
        levels = [lz.facts.get("isolation") for lz in self.launchers.values() if lz.facts.get("isolation")]
        return min(levels, key=order.index) if levels else "none"

    def counts(self) -> dict[str, dict[int, int]]:
        """Instance -> requests answered per replica, for instances behind a router."""
        return {n: dict(r.counts) for n, r in self.routers.items()}

    async def close(self) -> None:
        """Drop every replica's actor and the spares, the routers and the forwards; leave the
        cluster if joined."""
        if self.spares is not None:
            self.spares.close()
        await asyncio.gather(*(lz.close() for lz in self.launchers.values()), return_exceptions=True)
        for router in self.routers.values():
            with contextlib.suppress(Exception):
                await router.stop()
        for a in [*self.addresses.values(), self.head_forward]:
            if a is not None:
                a.close()
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.shutdown)
