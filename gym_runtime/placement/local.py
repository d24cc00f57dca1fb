"""Placement ``local`` (the default): every server instance on this host, in its sandbox (docs/runtime.md).

The bring-up calls three stages on a placement (:mod:`gym_runtime.placement`):

* :meth:`LocalPlacement.prepare` (phase "building venvs"): plan and build the venvs here;
* :meth:`LocalPlacement.open` (phase "starting sandbox"): decide Ray (a private head when a
  server uses it, :mod:`gym_runtime.ray.use`, or the given cluster) and start the
  environment's sandbox at the level the servers allow;
* :meth:`LocalPlacement.add_servers` (phase "starting servers"): ports in the sandbox network,
  the private Ray head, one supervised member per server instance (the sandbox is its launcher),
  each published on this host.

:meth:`LocalPlacement.close` closes the sandbox and removes the private Ray head's directory.
The module is long because it holds the three stages and their undo for one placement; Ray, the
sandbox and supervision come from their own rooms.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from gym_runtime.config import token_capture
from gym_runtime.errors import BuildError, GymRuntimeError
from gym_runtime.gym_release.startup_imports import startup_imports
from gym_runtime.ray import head as ray_head
from gym_runtime.ray import own as own_ray
from gym_runtime.ray import switch as ray_switch
from gym_runtime.ray import workers as ray_workers
from gym_runtime.ray.env import server_ray_env
from gym_runtime.ray.target import choose, ray_level, wait_reachable
from gym_runtime.ray.use import gym_sdk_venv, ray_users
from gym_runtime.supervise import contract, env_limit, passthrough, run_mark
from gym_runtime.supervise.interrupted import as_interrupted
from gym_runtime.supervise.orphans import Watchdog
from gym_runtime.supervise.ports import check_free
from gym_runtime.task_sandboxes import bringup as task_sandboxes
from gym_runtime.task_sandboxes.install import ensure_provider
from gym_runtime.venvs.bytecode import PRELOADED_PARENT, RAY_HEAD

_QUIETING: list[bool] = []  # the logger's state before the first of the uses now open, one entry per use


@contextlib.contextmanager
def quiet_sandbox_log() -> Iterator[None]:
    """Silence the sandbox's own level warning (the bring-up says it once, with its progress).
    Uses may overlap (the stub model's launcher starts beside the environment's sandbox): the
    logger stays silent until the last one open ends, then gets back the state it had before the
    first."""
    quiet = logging.getLogger("sandbox")
    _QUIETING.append(_QUIETING[0] if _QUIETING else quiet.disabled)
    quiet.disabled = True
    try:
        yield
    finally:
        was = _QUIETING.pop()
        if not _QUIETING:
            quiet.disabled = was


# third-party modules that servers import at start-up (the built-in servers and NeMo Gym's alike)
SHARED_MODULES = (
    "pydantic",
    "fastapi",
    "uvicorn",
    "starlette",
    "httpx",
    "aiohttp",
    "openai",
    "yaml",
    "omegaconf",
    # what a FastAPI app served by uvicorn imports once it runs: uvicorn's event loop (uvloop where the venv has
    # it), its lifespan and websocket protocol choice, anyio's asyncio backend, pydantic's v1 layer (FastAPI's
    # compatibility); imported after the fork, each server would hold its own copy (docs/performance.md)
    "uvloop",
    "uvicorn.loops.auto",
    "uvicorn.lifespan.on",
    "uvicorn.protocols.websockets.auto",
    "anyio._backends._asyncio",
    "pydantic.v1",
)


class LocalPlacement:
    """Servers on this host. ``env``: the :class:`~gym_runtime.runtime.bringup.Environment`."""

    kind = "local"

    def __init__(self, env: Any) -> None:
        self.env = env
        self.sandbox: Any = None
        self.pythons: dict[str, Path] = {}
        self.built: Any = None  # the venvs' BuildResult (venvs/build.py), once prepare() ran
        self.addresses: dict[str, tuple[str, int]] = {}
        self.head_inside: tuple[str, int] | None = None
        self.task_url: str | None = None  # the task-sandbox API as servers reach it
        self.gate_addr: str | None = None  # the OpenSandbox gate as servers reach it (host:port)
        self.ray_tmp: Path | None = None
        self.ray_bin: Path | None = None  # the private Ray head's `ray` (ray_head.ray_binary), once open() chose one
        self._taken: set[int] = set()
        self._preloads: dict[Path, Any] = {}  # interpreter -> what its servers share (sandbox/zygote.py)

    # ------------------------------------------------------------------ stages
    async def prepare(self, merged: Any) -> None:
        """Plan and build every server's venv on this host; each instance's build state is kept in
        ``env.build_state`` (the head server shows it during start-up, head_view.py) and the build
        is recorded for ``gym-runtime logs`` (venvs/record.py), failed or not."""
        from gym_runtime.venvs import build_venvs, plan_venvs
        from gym_runtime.venvs.progress import Reporter
        from gym_runtime.venvs.record import record_build

        env = self.env
        say, state = env._say, env.build_state
        state.update(dict.fromkeys(merged.instances, "venv build queued"))

        class _Progress(Reporter):
            def stage(self, key: str, label: str, stage: str) -> None:
                state.update(dict.fromkeys(label.split(", "), f"building venv: {stage}"))

            def done(self, key: str, label: str, status: str, seconds: float) -> None:
                state.update(dict.fromkeys(label.split(", "), f"venv {status}"))
                say(f"venv {label}: {status} in {seconds:.2f}s")

        started, names = time.time(), list(merged.instances)
        try:
            plan = await asyncio.to_thread(plan_venvs, merged, env.settings, env.req.python)
            for note in plan.notes:
                say(f"note: {note}")
            venvs = await asyncio.to_thread(build_venvs, plan, env.settings, progress=_Progress(), cancel=env.cancel)
        except BuildError as e:
            record_build(env.settings.home, names, started, error=e)  # `gym-runtime logs` shows it
            raise as_interrupted(e, env.phase) from None
        except GymRuntimeError as e:
            raise as_interrupted(e, env.phase) from None
        record_build(env.settings.home, names, started, venvs=venvs)
        self.built = venvs
        self.pythons = {n: Path(venvs.for_instance(n).python) for n in merged.instances}
        for venv in {p.parent.parent for p in self.pythons.values()}:  # a venv built before these existed
            await asyncio.to_thread(ensure_provider, venv)
            await asyncio.to_thread(ray_switch.ensure_ray_switch, venv)
        await env.bytecode.prepare(list(self.pythons.values()))

    async def open(self) -> None:
        """Choose Ray (servers that use it) within the run's backend's ``ray_scope``, then start the
        sandbox the backend gives (``env.backend``, :mod:`sandbox.backends`). Raises
        :class:`~gym_runtime.errors.SandboxServiceSettingsError` ``GR-OSB-RAY`` when a cluster to
        join is given to a backend whose servers each run in a sandbox of their own
        (:func:`gym_runtime.ray.target.choose`)."""
        env, req = self.env, self.env.req
        merged = env.merged
        use = ray_users(merged, {n: gym_sdk_venv(p) for n, p in self.pythons.items()}, env.settings.ray_undeclared)
        users = [n for n, u in use.items() if u.uses]
        env.ray = replace(
            choose(
                req.ray_address,
                merged.data.get("ray_head_node_address"),
                env.settings.environ,
                users,
                env.backend.ray_scope,
            ),
            without=tuple(n for n, u in use.items() if u.skipped),
        )
        env._say(env.ray.describe())
        for n in users:
            env._say(f"ray: {n} uses Ray: {use[n].why}")
        for n in env.ray.without:
            env._say(f"ray: {n} runs without Ray: {use[n].why}")
        for n, (was, now) in own_ray.raised_limits(env.ray, env.settings.server_memory_mb).items():
            env._say(
                f"ray: {n}'s sandbox gets {now} MiB of memory, not {was} (GYM_RUNTIME_SERVER_MEMORY_MB): "
                "its own Ray runs beside it"
            )
        if env.ray.mode == "join":
            await asyncio.to_thread(wait_reachable, env.ray.address, env.ray.source, 30.0)
        elif env.ray.mode == "local":
            self.ray_bin = ray_head.ray_binary(self.pythons[n] for n in env.ray.needed_by)
            await asyncio.to_thread(ray_head.check_native, self.ray_bin, env.ray.source)
        level = await asyncio.to_thread(ray_level, env.ray, req.isolation, req.require_isolation)
        if level != req.isolation:
            env._say(
                f"isolation: {level} for this environment: {', '.join(env.ray.needed_by)} use Ray, whose "
                "drivers find their raylet by scanning the process table (a private /proc hides it)"
            )
        with quiet_sandbox_log():  # its level warning is said once, below, with our progress lines
            self.sandbox = await env.backend.start(
                env.egress, env.work_dir / "sandbox", require_full=req.require_isolation, level=level
            )
        if self.sandbox.report.warning:
            env._say("WARNING: " + self.sandbox.report.warning)
        if self.sandbox.level.value == "none":  # no pid namespace takes helpers down
            env.supervisor.watchdog = env.supervisor.watchdog or Watchdog.start(env.supervisor.run_mark)

    async def add_servers(self, merged: Any) -> None:
        """Ports, the private Ray head (when chosen), one member per server, each published."""
        env = self.env
        seed = startup_imports(merged.release, ray=bool(env.ray.needed_by))
        env.bytecode.plan_seed(self._parents_venvs(merged), seed)  # before any cache is made
        self.addresses, self.head_inside = await self._assign_ports(merged)
        if env.task_sandboxes is not None:
            self.task_url = await task_sandboxes.inside_url(env.task_sandboxes, self.sandbox, self._fresh)
        if env.osb_gate is not None:
            self.gate_addr = await task_sandboxes.gate_address(env.osb_gate, self.sandbox, self._fresh)
        env.ray_inside = self._add_ray_member() if env.ray.mode == "local" else env.ray.address
        env.supervisor.rebind = self._rebind
        env.bytecode.finished = self.respec_learned
        inside = contract.config_view(merged.data, self.addresses, self.head_inside, env.ray_inside)
        patch = task_sandboxes.gate_patch(env.osb_gate, self.gate_addr, merged.instances)
        for name, inst in merged.instances.items():
            self._add_server(
                name,
                inst,
                self.pythons[name],
                contract.server_config_yaml(inside, merged.secrets, name, patch),
                self.addresses[name],
            )
        env_limit.check_specs(m.spec for m in env.supervisor.members.values() if m.kind == "server")
        for m in env.supervisor.members.values():
            if m.public is None and m.port is not None and m.launcher is self.sandbox:
                m.public = tuple(await self.sandbox.publish(m.port))
        specs = [m.spec for m in env.supervisor.members.values() if m.launcher is self.sandbox]
        for line in await self.sandbox.prepare(specs, env._say):  # e.g. the private tree copies made without bubblewrap
            env._say(line)
        # the preloaded parents import now (prepare started them); the seed compiles beside them, not before
        env.bytecode.start_seed()
        if env.ray.mode == "local":  # the private Ray head (wave 0) reads the seed: it starts once that is compiled
            await env.bytecode.seeded()

    @property
    def close_step(self) -> tuple[str, float]:
        """The teardown step: its name and deadline (s), the sandbox backend's."""
        return self.env.backend.close_step if self.env.backend is not None else ("sandbox", 5.0)

    # ------------------------------------------------------------------ what the rest of the daemon reads
    def public(self) -> dict[str, tuple[str, int]]:
        """Instance -> the address reaching it from this host (the head server's config view)."""
        return {n: m.public for n, m in self.env.supervisor.members.items() if m.kind == "server"}

    def servers(self) -> dict[str, str | None]:
        """Instance -> ``http://host:port`` (the ready line, rollouts)."""
        return {n: m.url for n, m in self.env.supervisor.members.items() if m.kind == "server"}

    def replica_nodes(self) -> dict[str, dict[str, str | None]]:
        """Instance -> {replica: node}: each instance is its one replica, on this host (``local``)."""
        merged = self.env.merged
        return {n: {n: "local"} for n in (merged.instances if merged is not None else ())}

    @property
    def isolation(self) -> str:
        return self.sandbox.level.value

    async def close(self) -> None:
        """Close the sandbox (forwards, proxy, namespace holder) and the private Ray head's directory."""
        if self.sandbox is not None:
            await self.sandbox.close()
        ray_head.remove_temp_dir(self.ray_tmp)

    def local_venvs(self) -> list[Any]:
        """The venvs built on this host for the environment (:class:`~gym_runtime.venvs.build.Venv`
        each: path, digest, instances, status), once :meth:`prepare` ran; ``[]`` before."""
        return list(self.built.venvs) if self.built is not None else []

    def sandboxes(self) -> list[Any]:
        """The sandboxes this placement started on this host (process accounting)."""
        return [self.sandbox] if self.sandbox is not None else []

    def open_handles(self) -> str:
        """What closing waits on, for a stop report."""
        return f"{len(self.sandbox.processes)} process handle(s)" if self.sandbox is not None else ""

    # ------------------------------------------------------------------ ports and members
    async def _assign_ports(self, merged: Any) -> tuple[dict[str, tuple[str, int]], tuple[str, int]]:
        env = self.env
        explicit = {n: i.port for n, i in merged.instances.items() if i.port}
        none_level = self.sandbox.level.value == "none"
        servers_addr = env.servers_addr
        taken = {env.head_addr[1], servers_addr[1], *explicit.values()}
        if env.stub_url:
            taken.add(int(env.stub_url.rsplit(":", 1)[1].split("/")[0]))
        if none_level:  # servers share the host network: a taken explicit port fails now (C04)
            for n, p in explicit.items():
                check_free(merged.instances[n].host or "127.0.0.1", p, n)

        self._taken = taken
        out = {n: (i.host or "127.0.0.1", explicit.get(n) or self._fresh()) for n, i in merged.instances.items()}
        # servers reach the head server on a listener of its own, which serves them Gym's read-only routes only
        head_inside = await self.sandbox.expose_host_service(
            self._fresh() if not none_level else servers_addr[1], *servers_addr
        )
        return out, tuple(head_inside)

    def _fresh(self) -> int:
        """A new automatic port in the servers' network, never one assigned in this run."""
        while (p := self.sandbox.allocate_port()) in self._taken:
            pass
        self._taken.add(p)
        return p

    def _rebind(self, name: str) -> None:
        """Give server ``name`` a new automatic port and refresh every server's config (rebind.py;
        only at isolation none, where the inside address is the public one)."""
        env = self.env
        m = env.supervisor.members[name]
        m.port = self._fresh()
        m.public = (m.host, m.port)
        self.addresses[name] = (self.addresses[name][0], m.port)
        self.respec()

    def respec(self) -> None:
        """Give every server's spec the config of ``env.merged`` as it is now (its
        ``NEMO_GYM_CONFIG_DICT``, read at its next start) and refresh the head server's view: after
        a port moved (:meth:`_rebind`) or the config was merged again (``dry-run --watch``,
        :mod:`gym_runtime.runtime.reload`)."""
        env = self.env
        assert self.head_inside is not None  # placed by start(), before any respec
        inside = contract.config_view(env.merged.data, self.addresses, self.head_inside, env.ray_inside)
        patch = task_sandboxes.gate_patch(env.osb_gate, self.gate_addr, env.merged.instances)
        servers = [s for s in env.supervisor.members.values() if s.kind == "server"]
        private = {
            s.name: contract.private_env(
                contract.server_config_yaml(inside, env.merged.secrets, s.name, patch), self._passed(s.name)
            )
            for s in servers
        }
        env_limit.check_envs({s.name: {**s.spec.env, **private[s.name]} for s in servers})  # before any spec changes
        for s in servers:
            s.spec.private_env = private[s.name]
        env.refresh_outside()

    def reseat(self, name: str, venv: Any) -> None:
        """Run server ``name`` on ``venv`` (a :class:`~gym_runtime.venvs.build.Venv`) from its next
        start on: its spec is made again as at the start, on the same address and with its config
        as it is now; the running process is not touched (``dry-run --watch`` after an edit of the
        server's requirements, :mod:`gym_runtime.supervise.venv_swap`)."""
        from gym_runtime.venvs.build import VenvSet

        self.pythons[name] = Path(venv.python)
        self._spec_again(name)
        if self.built is not None:
            by_instance = {**self.built.by_instance, name: venv.digest}
            kept = {v.digest: v for v in (*self.built.venvs, venv) if v.digest in by_instance.values()}
            self.built = VenvSet(tuple(kept.values()), by_instance)

    def respec_learned(self, name: str) -> None:
        """The learning dir of process ``name`` was harvested and removed
        (:attr:`~gym_runtime.venvs.env_bytecode.EnvironmentBytecode.finished`): a server among them
        reads its venv's shared cache from its next start on (a crash's restart, an edit's), where
        its spec would still bind that dir (a forked server could then not be made, and started
        on its own). Its spec is made again as at the start; the running process is not touched."""
        m = self.env.supervisor.members.get(name)
        if m is not None and m.kind == "server" and m.launcher is self.sandbox:
            self._spec_again(name)

    def _spec_again(self, name: str) -> None:
        """Make server ``name``'s spec again as at the start: its venv's Python, address and
        bytecode cache as they are now, its config as the last :meth:`respec` gave it."""
        m = self.env.supervisor.members[name]
        m.spec = self._server_spec(
            name, self.env.merged.instances[name], self.pythons[name], m.spec.private_env, self.addresses[name]
        )

    def _add_server(self, name: str, inst: Any, python: Path, config_yaml: str, addr: tuple[str, int]) -> None:
        env = self.env
        spec = self._server_spec(name, inst, python, contract.private_env(config_yaml, self._passed(name)), addr)
        sdir = Path(inst.server_dir.path)
        env._member(
            name,
            "server",
            spec,
            self.sandbox,
            addr[1],
            host=addr[0],
            auto_port=not inst.port,
            load_bound_start=own_ray.load_bound_start(env.ray, name),
            info={
                "server_type": inst.server_type,
                "implementation": inst.implementation,
                "config_path": name,
                "dir_path": str(sdir),
                "entrypoint": inst.entrypoint,
            },
        )

    def _server_spec(self, name: str, inst: Any, python: Path, private_env: Any, addr: tuple[str, int]) -> Any:
        """The sandbox ``ProcessSpec`` of server ``name`` run by ``python`` on ``addr``."""
        from sandbox import ProcessSpec

        env = self.env
        wd = env.work_dir / "servers" / name
        wd.mkdir(parents=True, exist_ok=True)
        sdir = Path(inst.server_dir.path)
        cache = env.bytecode.user(python, f"{inst.server_type}/{inst.implementation} {sdir}", name)
        environ = {
            **contract.server_env(name, sdir, python, wd, env.settings.environ),
            **cache.env,
            run_mark.VAR: env.supervisor.run_mark,
            **task_sandboxes.server_env(env.task_sandboxes, self.task_url, name),
            **server_ray_env(env.ray, name, sdir, python, env.settings.environ),
        }
        spec = ProcessSpec(
            name,
            self._argv(python, inst),
            sdir,
            environ,
            read_only_paths=[sdir.parent.parent, python.parent.parent, *contract.trust_paths(environ)],
            writable_paths=[
                wd,
                *self._ray_dirs(),
                *cache.writable,
                *token_capture.writable_dir(env.merged.data, inst.server_type),
            ],
            private_env=private_env,
            limits=self._limits(name),
            cow_paths={str(sdir): str(wd / "tree")} if env.settings.writable_tree(name) else {},
            tree=sdir,
            tree_root=sdir.parent.parent,
            ports=[addr[1]],
            preload=self._preload(python, name),
        )
        return spec

    def _parents_venvs(self, merged: Any) -> list[Path]:
        """The interpreters of the venvs whose servers the sandbox will fork from a preloaded parent
        (its own answer, from the argv and trees the specs will have); none with preloading off."""
        if not self.env.settings.preload:
            return []
        settings = self.env.settings
        servers = {
            name: (self._argv(self.pythons[name], inst), settings.writable_tree(name))
            for name, inst in merged.instances.items()
        }
        return [Path(py) for py in self.sandbox.parent_interpreters(servers)]

    @staticmethod
    def _argv(python: Path, inst: Any) -> list[str]:
        """How server ``inst`` is run: its venv's ``python`` and its entry point."""
        return [str(python), inst.entrypoint]

    def _preload(self, python: Path, name: str) -> Any:
        """What the servers run by ``python`` import once in a preloaded parent (sandbox/zygote.py):
        the third-party modules every server imports (Ray too when a server of the venv uses it) and
        the release's SDK modules; the parent reads the venv's shared bytecode cache and reports
        what it imported (a user of the venv, recorded once ``name``, its first server, is ready);
        it does not carry the run's mark (a process with the mark outside every server's group is a
        helper to reap at stop, orphans.py). None under ``GYM_RUNTIME_PRELOAD=off``."""
        from sandbox.zygote import Preload

        if not self.env.settings.preload:
            return None
        if python not in self._preloads:
            cache = self.env.bytecode.user(
                python, PRELOADED_PARENT, f"the {PRELOADED_PARENT}", ready_as=name, report=True
            )
            report = str(cache.report_file) if cache.report_file is not None else None
            ray = ("ray",) if any(self.pythons[n] == python for n in self.env.ray.needed_by) else ()
            release = self.env.merged.release
            self._preloads[python] = Preload(
                SHARED_MODULES + ray + release.preload_modules + release.preload_when_present,
                dict(cache.env),
                tuple(cache.writable),
                withheld=(run_mark.VAR,),
                report=report,
            )
        return self._preloads[python]

    def _passed(self, name: str) -> dict[str, str]:
        """The variables passed into server ``name`` from the daemon's environment (passthrough.py,
        and the token-capture control token for a model server, config/token_capture.py)."""
        env = self.env
        inst = env.merged.instances[name]
        return {
            **passthrough.values_for(env.settings, name),
            **token_capture.passed(env.merged.data, inst.server_type, dict(env.settings.environ)),
        }

    def _limits(self, name: str) -> Any:
        """Server ``name``'s resource limits (docs/runtime.md, "Resource limits"; settings), its
        memory raised for its own Ray under the ``own`` Ray mode (:mod:`gym_runtime.ray.own`)."""
        from sandbox import ResourceLimits

        memory = self.env.settings.server_memory_mb
        memory = own_ray.raised_limits(self.env.ray, memory).get(name, (memory, memory))[1]
        return ResourceLimits(memory_mb=memory, pids=self.env.settings.server_pids)

    def _add_ray_member(self) -> str:
        """ONE private Ray head inside the sandbox network (servers reach it on loopback); see
        :mod:`gym_runtime.ray.head`. It starts in wave 0, so every server starts once the
        head is ready (the module doc, "Head first"). Returns the GCS address servers get."""
        from sandbox import ProcessSpec

        env, pythons = self.env, self.pythons
        port = self._fresh()
        self.ray_tmp = tmp = ray_head.make_temp_dir()
        ray_bin = self.ray_bin
        assert ray_bin is not None  # found by prepare() for a local Ray head
        venvs = sorted({p.parent.parent for p in pythons.values()})  # Ray workers run server venvs' Pythons
        trees = ray_workers.head_read_only_paths(Path(i.server_dir.path) for i in env.merged.instances.values())
        environ, writable = ray_head.head_env(ray_bin, tmp), [tmp]
        if ray_bin.parent.parent in venvs:  # the daemon's own Ray (no server venv has one) keeps its bytecode
            cache = env.bytecode.user(ray_bin.parent / "python", RAY_HEAD, "ray_head")
            environ, writable = {**environ, **cache.env}, [tmp, *cache.writable]
        ports = [self._fresh() for _ in ray_head.PORT_FLAGS]
        spec = ProcessSpec(
            "ray_head",
            ray_head.head_argv(ray_bin, port, tmp, ports),
            tmp,
            environ,
            read_only_paths=[ray_bin.parent.parent, *venvs, *trees, ray_head.HOLD_DIR],
            writable_paths=writable,
        )
        env._member(
            "ray_head",
            "ray",
            spec,
            self.sandbox,
            port,
            probe_path="log:" + ray_head.READY_TEXT,
            kill_on_stop=True,
            load_bound_start=True,
            wave=0,
            info={"server_type": "ray", "implementation": f"ray ({ray_bin})"},
        )
        return f"127.0.0.1:{port}"

    def _ray_dirs(self) -> list[Path]:
        """Ray's session dirs servers must reach (raylet sockets): ours, or a joined local cluster's."""
        if self.ray_tmp is not None:
            return [self.ray_tmp]
        if self.env.ray.mode == "join" and ray_head.DEFAULT_TEMP_DIR.is_dir():
            return [ray_head.DEFAULT_TEMP_DIR]
        return []
