"""The node side of Ray placement: one actor per server replica (docs/scale-out.md "Who runs where").

:class:`ServerReplica` is made a Ray actor by the driver (:mod:`gym_runtime.placement.actor`,
used by :mod:`gym_runtime.placement.remote` and the warm spares), which owns it: Ray kills it when the daemon's driver exits,
also on SIGKILL. On the node Ray chose from the replica's ``placement`` block it:

1. materialises the package (:mod:`gym_runtime.placement.package`: in place, or the shipped
   archive, verified, in the node's cache ``$GYM_RUNTIME_HOME/packages``);
2. finds the server instance in the driver's resolved config (no second merge) and builds or
   reuses its venv with the runtime's builder (``$GYM_RUNTIME_HOME/venvs`` of the node; the
   wheels formats install their vendored closure offline as everywhere);
3. starts a :class:`sandbox.Sandbox` at the best level the node gives (or the one forced, or
   ``none`` for a server that joins the Ray cluster), with the daemon's egress policy; at
   ``full``/``partial`` each peer instance and the head server answer inside the sandbox at the
   same ``127.0.0.1:<port>`` as everywhere, forwarded to their stable addresses on the daemon's
   node;
4. starts the server (Gym's process contract, :mod:`gym_runtime.supervise.contract`; the
   node's server resource limits; a server that joins the Ray cluster runs its tasks as a Ray
   job in its own venv, :mod:`gym_runtime.ray.workers`) and
   publishes its port on the node's address; reports exits (:meth:`wait_exit`), its log
   (:meth:`read_log`) and stops it.

While steps 1-3 run, :meth:`progress` answers the node's phase (``unpacking package``,
``building venv: stage 1``, ``building venv: stage 2 (offline)``, ``starting sandbox``...): the
driver polls it and the head server shows it for the instance (docs/scale-out.md).

Every method returns plain data; a user error on the node comes back as
``{"error": GymRuntimeError.to_dict()}`` so the driver can name the node with it. Methods run on
the actor's event loop (``spawn`` must: ``PR_SET_PDEATHSIG`` follows the forking thread), so the
servers die with the actor's worker process; at isolation ``none`` a watchdog process kills their
process groups too (:mod:`gym_runtime.supervise.orphans`).

The module is long because the four steps and the server's lifetime are methods of one Ray actor
class, Ray's unit of placement and ownership; each step's work is in the module it names.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_runtime.errors import GymRuntimeError, StartError
from gym_runtime.ray.target import RayTarget
from gym_runtime.venvs.progress import Reporter


@dataclass(frozen=True)
class ReplicaJob:
    """What one replica needs, sent by the driver (picklable).

    ``name``: the supervised member (``acme_math`` or ``acme_math.1``); ``data``: the resolved
    config; ``secrets``: its :class:`~gym_runtime.config.secrets.SecretMap` (the server gets only
    the secrets its own config references); ``inside``: instance -> port inside every sandbox (``"__head__"`` for the head
    server); ``stable``: instance -> daemon-side ``(host, port)`` (same keys); ``policy``: the
    daemon's ``sandbox.EgressPolicy``; ``settings``: pin mode, pins and their origins, default Python
    (:func:`gym_runtime.placement.replica.node_settings`); ``isolation``: forced level or None;
    ``passed``: the operator's variables passed to this instance, with the daemon's values
    (:mod:`gym_runtime.supervise.passthrough`; private to the server process, as its config is);
    ``release``: the Gym release profile the daemon chose (:mod:`gym_runtime.gym_release`), so the
    node installs the same SDK and pins."""

    instance: str
    replica: int
    name: str
    run_id: str
    package_root: str
    package_digest: str
    data: dict[str, Any]
    secrets: Any
    inside: dict[str, int]
    stable: dict[str, tuple[str, int]]
    ray_address: str | None
    policy: Any
    settings: dict[str, Any] = field(default_factory=dict)
    python: str | None = None
    isolation: str | None = None
    require_full: bool = False
    passed: dict[str, str] = field(default_factory=dict, repr=False)
    release: Any = None


HEAD = "__head__"


def job_settings(s: Any) -> dict[str, Any]:
    """What a replica's node takes from the daemon's settings ``s`` (:func:`node_settings` applies it)."""
    return {
        "pin_mode": s.pin_mode,
        "pins": s.pins,
        "pin_origins": s.pin_origins,
        "python": s.python,
        "python_explicit": s.python_explicit,
        "ray_undeclared": s.ray_undeclared,
    }


def node_settings(job: ReplicaJob) -> Any:
    """This node's runtime settings (its own ``GYM_RUNTIME_HOME``, venv and uv cache dirs) with
    the daemon's pin mode, pins (and where each came from), default Python and Ray rule for
    undeclared classes (``GYM_RUNTIME_RAY_UNDECLARED``)."""
    from gym_runtime.settings import load_settings

    return load_settings(os.environ).with_overrides(**job.settings)


def builtin_root() -> Path:
    """The built-in server trees on this node (shipped beside ``gym_runtime`` as the ``servers``
    module, or installed with the runtime)."""
    try:
        import servers

        return Path(next(iter(servers.__path__)))
    except (ImportError, StopIteration):
        from gym_runtime.settings import builtin_servers_dir

        return builtin_servers_dir()


class ServerReplica:
    """One server replica on this node (module doc). Create with a :class:`ReplicaJob`, or with
    None for a warm spare that imports what a placement needs and waits for :meth:`adopt`
    (:mod:`gym_runtime.placement.spares`)."""

    def __init__(self, job: ReplicaJob | None, prepare: Callable[[], None] | None = None) -> None:
        import ray

        ctx = ray.get_runtime_context()
        self.node_id = ctx.get_node_id()
        self.node_ip = ray.util.get_node_ip_address()
        if job is None:
            if prepare is not None:  # a spare's imports (spares.warm, sent by reference)
                prepare()
        else:
            self._take(job)

    async def adopt(self, job: ReplicaJob) -> dict[str, Any]:
        """A spare becomes ``job``'s replica; :meth:`where`."""
        self._take(job)
        return await self.where()

    def _take(self, job: ReplicaJob) -> None:
        self.job = job
        self.settings = node_settings(job)
        self.work = self.settings.home / "runs" / job.run_id / "servers" / job.name
        self.work.mkdir(parents=True, exist_ok=True)
        self.log_path = self.work.parent / f"{job.name}.log"
        self.sandbox: Any = None
        self.spec: Any = None
        self.port: int | None = None
        self.proc: Any = None
        self.watchdog: Any = None
        # mode `join` when the server joins the Ray cluster (its tasks run as a Ray job: ray/workers.py);
        # `without` names it when NeMo Gym would give it a driver but it calls no Ray (ray/use.py)
        self.ray = RayTarget("none")
        self.merged: Any = None  # the instance's config on this node (MergedConfig), once built
        self.facts: dict[str, Any] = {}
        self.phases: list[tuple[str, float]] = []  # (phase, unix time) of steps 1-3, in order

    # ------------------------------------------------------------------ placement
    def _phase(self, what: str) -> None:
        self.phases.append((what, time.time()))  # also called from the build's worker thread

    async def progress(self) -> list[tuple[str, float]]:
        """The phases of :meth:`prepare` so far, oldest first: ``[(phase, unix time)]``; the last
        one is where the node is now (module doc)."""
        return list(self.phases)

    async def where(self) -> dict[str, Any]:
        """``{"node_id", "node_ip", "pid"}`` of this actor."""
        return {"node_id": self.node_id, "node_ip": self.node_ip, "pid": os.getpid()}

    async def has_package(self) -> bool:
        """True when the package is on this node at the driver's path with the same digest."""
        from gym_runtime.placement.package import in_place

        return await asyncio.to_thread(in_place, self.job.package_root, self.job.package_digest) is not None

    async def prepare(self, shipped: tuple[bytes, str] | None = None) -> dict[str, Any]:
        """Materialise, build, sandbox (module doc steps 1-3). ``shipped``: ``(archive, sha256)``
        when the package is not here. Returns the facts (``package``, ``venv``, ``reused``,
        ``isolation``, ``node_ip``, ``took_s``: seconds per step ``package``/``venv``/``sandbox``...) or ``{"error": ...}``."""
        try:
            return await self._prepare(shipped)
        except GymRuntimeError as e:
            return {"error": e.to_dict()}

    async def _prepare(self, shipped: tuple[bytes, str] | None) -> dict[str, Any]:
        from gym_runtime.placement.package import in_place, unpack

        job = self.job
        self._phase("checking package")
        took, t0 = {}, time.monotonic()
        root = await asyncio.to_thread(in_place, job.package_root, job.package_digest)
        how = "in place"
        if root is None:
            if shipped is None:
                raise StartError("the package is not on this node and was not shipped", code="GR-PLACE-PACKAGE")
            self._phase("unpacking package")
            root = await asyncio.to_thread(
                unpack, shipped[0], shipped[1], job.package_digest, self.settings.home / "packages"
            )
            how = "shipped"
        self._phase("planning venv")
        took["package"], t0 = time.monotonic() - t0, time.monotonic()
        inst, python, venv = await asyncio.to_thread(self._build, root)
        took["venv"], t0 = time.monotonic() - t0, time.monotonic()
        level = await asyncio.to_thread(self._level, inst, python)
        self._phase("starting sandbox")
        await self._start_sandbox(level)
        self._phase("placed")
        self.spec = self._spec(inst, python)
        took["sandbox"] = time.monotonic() - t0
        self.facts = {
            "node_id": self.node_id,
            "node_ip": self.node_ip,
            "package": how,
            "package_root": str(root),
            "venv": str(venv.path),
            "reused": venv.reused,
            "isolation": self.sandbox.level.value,
            "warning": self.sandbox.report.warning or None,
            "took_s": {k: round(v, 2) for k, v in took.items()},
        }
        return self.facts

    def _build(self, root: Path) -> tuple[Any, Path, Any]:
        from gym_runtime.config import MergedConfig, builtin_server_dirs
        from gym_runtime.config.instances import build_instances
        from gym_runtime.config.sources import Sources
        from gym_runtime.errors import ConfigError, ViolationList
        from gym_runtime.package import load_package
        from gym_runtime.ray.switch import ensure_ray_switch
        from gym_runtime.venvs import build_venvs, plan_venvs

        job = self.job
        pkg = load_package(root)
        instances, _, problems = build_instances(
            job.data, Sources(), pkg.server_dirs, builtin_server_dirs(builtin_root())
        )
        ViolationList(problems).raise_if_any(ConfigError, f"server instance {job.instance!r} is invalid on this node")
        self.merged = merged = MergedConfig(pkg, job.data, {job.instance: instances[job.instance]}, release=job.release)
        plan = plan_venvs(merged, self.settings, job.python)
        venv = build_venvs(plan, self.settings, progress=_PhaseReporter(self._phase)).for_instance(job.instance)
        ensure_ray_switch(Path(venv.path))  # a venv built before the switch existed
        return instances[job.instance], Path(venv.python), venv

    def _level(self, inst: Any, python: Path) -> str | None:
        """The isolation level: the forced one, else the best here; ``none`` for a server that
        joins the Ray cluster (it needs the node's raylet: :func:`gym_runtime.ray.target.ray_level`)."""
        from gym_runtime.ray.target import ray_level
        from gym_runtime.ray.use import gym_sdk_venv, ray_use

        job = self.job
        use = ray_use(inst, self.merged, gym_sdk_venv(python), undeclared=self.settings.ray_undeclared)
        without = (inst.name,) if use.skipped else ()
        if not (use.uses and job.ray_address):
            self.ray = RayTarget("none", without=without)
            return job.isolation
        self.ray = RayTarget("join", job.ray_address, "placement", (inst.name,), without)
        return ray_level(self.ray, job.isolation, job.require_full)

    async def _start_sandbox(self, level: str | None) -> None:
        from gym_runtime.supervise.orphans import Watchdog
        from sandbox import Sandbox

        job = self.job
        self.sandbox = sb = await Sandbox.start(
            job.policy, self.work / "sandbox", require_full=job.require_full, level=level
        )
        if sb.level.value == "none":
            self.watchdog = Watchdog.start()
            self.port = sb.allocate_port()
            return
        self.port = job.inside[job.instance]
        for peer, port in job.inside.items():
            if peer != job.instance:
                await sb.expose_host_service(port, *job.stable[peer])

    def _spec(self, inst: Any, python: Path) -> Any:
        from gym_runtime.config import token_capture
        from gym_runtime.ray.env import server_ray_env
        from gym_runtime.supervise import contract
        from sandbox import ProcessSpec, ResourceLimits

        job = self.job
        if self.sandbox.level.value == "none":  # host network: peers at their stable addresses
            addresses = {n: a for n, a in job.stable.items() if n != HEAD}
            assert self.port is not None  # allocated above
            addresses[job.instance] = (self.node_ip, self.port)
            head = job.stable[HEAD]
        else:  # own network: every peer at the same inside port as everywhere
            addresses = {n: ("127.0.0.1", p) for n, p in job.inside.items() if n != HEAD}
            head = ("127.0.0.1", job.inside[HEAD])
        view = contract.config_view(job.data, addresses, head, job.ray_address)
        text = contract.server_config_yaml(view, job.secrets, job.instance)
        sdir = Path(inst.server_dir.path)
        env = {
            **contract.server_env(job.instance, sdir, python, self.work, os.environ),
            **server_ray_env(self.ray, job.instance, sdir, python, os.environ),
        }  # as on the daemon's host
        limits = ResourceLimits(memory_mb=self.settings.server_memory_mb, pids=self.settings.server_pids)
        return ProcessSpec(
            job.name,
            [str(python), inst.entrypoint],
            sdir,
            env,
            read_only_paths=[sdir.parent.parent, python.parent.parent, *contract.trust_paths(env)],
            writable_paths=[self.work, *token_capture.writable_dir(job.data, inst.server_type)],
            private_env=contract.private_env(text, job.passed),
            limits=limits,
            tree=sdir,
            tree_root=sdir.parent.parent,
        )

    # ------------------------------------------------------------------ the process
    async def spawn(self) -> dict[str, Any]:
        """Start the server (again); ``{"pid", "address": (node host, port), "log_offset"}`` (where
        this start's lines begin in :meth:`read_log`) or ``{"error"}``."""
        if self.proc is not None and self.proc.poll() is None:
            await self.proc.stop(0.0)
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.spec.stdout_fd = self.spec.stderr_fd = fd
        from gym_runtime.supervise import env_limit

        try:
            env_limit.check_specs([self.spec])  # the exact environment on this node (the head checked an estimate)
            self.proc = self.sandbox.spawn(self.spec)
        except GymRuntimeError as e:
            return {"error": e.to_dict()}
        finally:
            os.close(fd)
            self.spec.stdout_fd = self.spec.stderr_fd = None
        if self.watchdog is not None:
            try:
                self.watchdog.watch(os.getpgid(self.proc.pid))
            except OSError:
                pass
        if self.sandbox.level.value == "none":
            address = (self.node_ip, self.port)
        else:
            address = tuple(await self.sandbox.publish(self.port, host=self.node_ip))
        return {"pid": self.proc.app_pid() or self.proc.pid, "address": address, "log_offset": offset}

    async def wait_exit(self) -> dict[str, Any]:
        """Return when the server process ends: ``{"returncode", "reason", "detail"}``."""
        proc = self.proc
        await proc.wait()
        info = proc.exit_info()
        return {"returncode": info.returncode, "reason": info.reason, "detail": info.detail}

    async def read_log(self, offset: int, limit: int = 1 << 20) -> tuple[bytes, int]:
        """Log bytes written since ``offset`` (at most ``limit``) and the new offset."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                data = f.read(limit)
        except OSError:
            return b"", offset
        return data, offset + len(data)

    async def stop(self, grace_s: float) -> dict[str, Any] | None:
        """TERM, ``grace_s``, KILL the server (:meth:`sandbox.SandboxedProcess.stop`); its exit info."""
        if self.proc is None:
            return None
        info = await self.proc.stop(grace_s)
        return {"returncode": info.returncode, "reason": info.reason, "detail": info.detail}

    async def kill_now(self) -> None:
        """SIGKILL the server's whole tree at once."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill_now()

    async def close(self) -> None:
        """Stop everything on this node: the server (no grace), the sandbox, the watchdog."""
        if self.sandbox is not None:
            await self.sandbox.close()
            self.sandbox = None
        if self.watchdog is not None:
            self.watchdog.close()
            self.watchdog = None

    async def ping(self) -> bool:
        return True


class _PhaseReporter(Reporter):
    """The venv builder's progress (:class:`gym_runtime.venvs.progress.Reporter`) as node phases:
    ``building venv: <stage>`` (``venv``, ``stage 1``, ``stage 2 (offline)``, ``verify``...), then
    ``venv built`` / ``venv reused``."""

    def __init__(self, phase: Any) -> None:
        self._say = phase

    def stage(self, key: str, label: str, stage: str) -> None:
        self._say(f"building venv: {stage}")

    def done(self, key: str, label: str, status: str, seconds: float) -> None:
        self._say(f"venv {status}")


def free_inside_ports(count: int, avoid: set[int], start: int = 20000) -> list[int]:
    """``count`` ports for the sandboxes' own networks from ``start`` up, skipping ``avoid`` (the
    policy endpoints' ports, forwarded at their own numbers). Every replica sandbox has a private
    network, so the same numbers serve on every node."""
    out: list[int] = []
    port = start
    while len(out) < count:
        if port not in avoid:
            out.append(port)
        port += 1
    return out
