"""Bring an environment up and down on the running event loop: the stages of ``gym-runtime up``.

Data flows one way (DESIGN.md §2): Package -> MergedConfig -> venvs -> Sandbox + ports -> members
(stub model, private Ray, servers) -> Supervisor + head server. :class:`Environment` keeps what
each stage returned; :meth:`Environment.stop` undoes them in reverse, from any phase (a stop while
venvs build cancels the build).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gym_runtime.config import MergedConfig, PolicyValues
from gym_runtime.errors import BuildError, GymRuntimeError, StartError
from gym_runtime.ray_target import RayTarget, choose, given, ray_level, wait_reachable
from gym_runtime.settings import RuntimeSettings
from gym_runtime.supervise import (contract, head_view, policy_endpoint, preflight, processes, ray_head, ray_workers,
                                   readiness)
from gym_runtime.supervise import policy as job_policy
from gym_runtime.supervise.interrupted import StartInterrupted, as_interrupted
from gym_runtime.supervise.logs import LogSink
from gym_runtime.supervise.member import READY, Member
from gym_runtime.supervise.options import SuperviseOptions
from gym_runtime.supervise.orphans import Watchdog
from gym_runtime.supervise.ports import bind_listener, check_free
from gym_runtime.supervise.readiness import model_base_urls, policy_models
from gym_runtime.supervise.supervisor import Supervisor
from gym_runtime.supervise.teardown import HARD_DEADLINE_S, UNCLEAN_EXIT_CODE, Teardown
from gym_runtime.venvs.bytecode import RAY_HEAD, EnvironmentBytecode


@dataclass
class UpRequest:
    """Everything ``up`` was asked for (CLI flags or :class:`gym_runtime.Runtime` arguments)."""

    package: str | Path
    overrides: list[str] = field(default_factory=list)
    policy: PolicyValues = field(default_factory=PolicyValues)
    head_host: str = "127.0.0.1"
    head_port: int | None = None
    ray_address: str | None = None
    work_dir: Path | None = None
    require_isolation: bool = False
    isolation: str | None = None
    python: str | None = None
    stub_seed: int = 0
    options: SuperviseOptions = field(default_factory=SuperviseOptions)


@contextlib.contextmanager
def _quiet_sandbox_log() -> Iterator[None]:
    quiet = logging.getLogger("sandbox")
    was, quiet.disabled = quiet.disabled, True
    try:
        yield
    finally:
        quiet.disabled = was


class Environment:
    """One running environment. ``await start()`` -> the ready info dict (raises a
    :class:`~gym_runtime.errors.GymRuntimeError`); ``await stop(fast)``; ``await wait()`` -> exit code."""

    def __init__(self, req: UpRequest, settings: RuntimeSettings, progress=None) -> None:
        self.req, self.settings = req, settings
        self.progress = progress or (lambda msg: None)
        self.phase = "config"
        self.merged: MergedConfig | None = None
        self.ray = RayTarget("none")
        self.ray_tmp: Path | None = None
        self.egress: Any = None  # sandbox.EgressPolicy, read before any venv build (preflight.py)
        self.addresses: dict[str, tuple[str, int]] = {}
        self.head_inside: tuple[str, int] | None = None
        self.ray_inside: str | None = None
        self._taken: set[int] = set()
        self.stub_url: str | None = None
        self.sandbox: Any = None
        self.host_launcher: Any = None
        self.supervisor = Supervisor(req.options, self._say)
        self.bytecode = EnvironmentBytecode(self._say)
        self.head: Any = None
        self.outside: dict[str, Any] = {}
        self.ready_info: dict[str, Any] | None = None
        self.on_head = lambda url: None  # called with the head server's URL as soon as it serves
        self.build_state: dict[str, str] = {}  # instance -> its venv build's state (before it has a member)
        self.cancel = threading.Event()
        self._stopping = asyncio.Event()
        self._start_task: asyncio.Task | None = None
        self._head_sock: Any = None
        self._servers_sock: Any = None  # the head server as servers reach it (head/app.py, SERVERS_ROUTES)
        self._stopped: asyncio.Future | None = None
        self._t0 = time.monotonic()
        self.run_id = time.strftime("%Y%m%d-%H%M%S")
        self.work_dir = Path(req.work_dir or settings.home / "runs" / self.run_id).resolve()
        self.logs_dir = self.work_dir / "logs"

    def _say(self, msg: str) -> None:
        self.progress(msg)

    def _check_stop(self) -> None:
        if self._stopping.is_set():
            raise StartInterrupted(f"start-up was interrupted during phase {self.phase!r}")

    # ------------------------------------------------------------------ start
    async def start(self) -> dict[str, Any]:
        self._start_task = asyncio.current_task()
        preflight.check_flags(self.req.require_isolation, self.req.isolation)
        merged, self.stub_url = await job_policy.configure(self.req.package, self.req.overrides, self.req.policy,
                                                           self._say)
        self.merged = merged
        self._say(f"config: {len(merged.instances)} server instance(s): " + ", ".join(merged.instances))
        for w in merged.warnings:
            self._say("warning" + w.render())
        given(self.req.ray_address, merged.data.get("ray_head_node_address"), self.settings.environ)
        cfg_head = merged.data.get("head_server") if isinstance(merged.data.get("head_server"), dict) else {}
        head_port = self.req.head_port if self.req.head_port is not None else cfg_head.get("port", 0)
        head_sock = bind_listener(self.req.head_host, int(head_port or 0), "head server")
        self._head_sock = head_sock
        self._servers_sock = bind_listener("127.0.0.1", 0, "head server (the servers' listener)")
        self.head_addr = head_sock.getsockname()[:2]
        await self._start_head(head_sock)  # from here on `status` sees the phase and each server's state
        self._say(f"head server at {self.head.url} (GET /health shows the start-up)")
        self.on_head(self.head.url)
        self.egress = await preflight.check_host(self.settings.environ, model_base_urls(merged.data),
                                                 self.req.require_isolation, self.req.isolation)
        self._say(self.egress.summary())
        self._check_stop()
        self.phase = "building venvs"
        venvs = await self._build_venvs(merged)
        self._check_stop()
        self.phase = "starting sandbox"
        pythons = {n: Path(venvs.for_instance(n).python) for n in merged.instances}
        await self.bytecode.prepare(list(pythons.values()))
        gym_sdk = [n for n, p in pythons.items() if merged.instances[n].config.get("ray_enabled") is not False
                   and (merged.instances[n].config.get("ray_enabled") or contract.gym_sdk_venv(p))]
        self.ray = choose(self.req.ray_address, merged.data.get("ray_head_node_address"), self.settings.environ,
                          gym_sdk)
        self._say(self.ray.describe())
        if self.ray.mode == "join":
            await asyncio.to_thread(wait_reachable, self.ray.address, self.ray.source, 30.0)
        await self._start_sandboxes()
        self._check_stop()
        self.phase = "starting servers"
        self.addresses, self.head_inside = addresses, head_inside = await self._assign_ports(merged)
        self.ray_inside = ray_inside = self._add_ray_member(pythons) if self.ray.mode == "local" else self.ray.address
        self.supervisor.rebind = self._rebind
        inside = contract.config_view(merged.data, addresses, head_inside, ray_inside)
        for name, inst in merged.instances.items():
            self._add_server(name, inst, pythons[name], contract.server_config_yaml(inside, merged.secrets, name),
                             addresses[name])
        if self.stub_url:
            self._add_stub_member(int(self.stub_url.rsplit(":", 1)[1].split("/")[0]))
        await self._publish()
        public = {n: m.public for n, m in self.supervisor.members.items() if m.kind == "server"}
        self.outside = contract.config_view(merged.data, public, self.head_addr, ray_inside)
        self._say(f"starting {len(merged.instances)} server(s) (isolation: {self.sandbox.level.value})")
        self.supervisor.phase = "waiting for servers to answer GET /"
        self._check_stop()
        self.bytecode.learn(lambda name: self.supervisor.members[name].status == READY)
        await self._supervise(merged)
        if self.req.options.probe_policy:
            self.phase = self.supervisor.phase = "probing the policy model (--probe-policy)"
            async with httpx.AsyncClient(trust_env=False) as client:
                await policy_endpoint.check_reasoning(client, merged.instances, self._say)
        self.phase = "ready"
        self.ready_info = {
            "status": "ready", "head_server": self.head.url,
            "servers": {n: m.url for n, m in self.supervisor.members.items() if m.kind == "server"},
            "isolation": self.sandbox.level.value, "startup_s": round(time.monotonic() - self._t0, 3),
            "policy_model": {"base_url": merged.data.get("policy_base_url"), "stub": self.stub_url is not None},
            "ray": self.ray.to_dict(), "logs_dir": str(self.logs_dir)}
        return self.ready_info

    async def _supervise(self, merged: MergedConfig) -> None:
        """``supervisor.start`` while reporting a wait for the policy model endpoint(s): once every
        server is ready and an endpoint is not, the phase is :data:`readiness.ENDPOINT_PHASE` with a
        progress line at once and then every 15 s (URL and last probe result); a
        ``GR-START-MODEL-ENDPOINT`` error gets that probe result as its ``cause``."""
        sup, last = self.supervisor, {}

        def waiting() -> list[str]:
            urls = [u for u, s in sup.endpoints.items() if s == "pending"]
            if not urls or sup.state != "starting" or any(m.status != READY for m in sup.members.values()):
                return []
            sup.phase = self.phase = readiness.ENDPOINT_PHASE
            return urls

        async with httpx.AsyncClient(trust_env=False) as client:
            watch = asyncio.create_task(readiness.report_endpoint_wait(client, waiting, self._say, last))
            try:
                await sup.start(model_base_urls(merged.data), policy_models(merged.data))
            except StartError as e:
                if e.code == "GR-START-MODEL-ENDPOINT":
                    urls = {u: readiness.model_probe_url(u) for u, s in sup.endpoints.items() if s == "failed"}
                    lines = [f"last probe: GET {p}: {await readiness.probe(client, p) or last.get(u) or 'answered'}"
                             for u, p in urls.items()]
                    e.cause = "\n".join(lines + ([e.cause] if e.cause else [])) or None
                raise
            finally:
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)

    async def _build_venvs(self, merged: MergedConfig) -> Any:
        from gym_runtime.venvs import build_venvs, plan_venvs
        from gym_runtime.venvs.progress import Reporter
        from gym_runtime.venvs.record import record_build

        say, state = self._say, self.build_state
        state.update({n: "venv build queued" for n in merged.instances})

        class _Progress(Reporter):
            def stage(self, key: str, label: str, stage: str) -> None:
                state.update({n: f"building venv: {stage}" for n in label.split(", ")})

            def done(self, key: str, label: str, status: str, seconds: float) -> None:
                state.update({n: f"venv {status}" for n in label.split(", ")})
                say(f"venv {label}: {status} in {seconds:.2f}s")

        started, names = time.time(), list(merged.instances)
        try:
            plan = await asyncio.to_thread(plan_venvs, merged, self.settings, self.req.python)
            venvs = await asyncio.to_thread(build_venvs, plan, self.settings, progress=_Progress(), cancel=self.cancel)
        except BuildError as e:
            record_build(self.settings.home, names, started, error=e)  # `gym-runtime logs` shows it
            raise as_interrupted(e, self.phase) from None
        except GymRuntimeError as e:
            raise as_interrupted(e, self.phase) from None
        record_build(self.settings.home, names, started, venvs=venvs)
        return venvs

    async def _start_sandboxes(self) -> None:
        from sandbox import Sandbox

        policy = self.egress
        level = await asyncio.to_thread(ray_level, self.ray, self.req.isolation, self.req.require_isolation)
        if level != self.req.isolation:
            self._say(f"isolation: {level} for this environment: {', '.join(self.ray.needed_by)} use Ray, whose "
                      "drivers find their raylet by scanning the process table (a private /proc hides it)")
        with _quiet_sandbox_log():  # its level warning is said once, below, with our progress lines
            self.sandbox = await Sandbox.start(policy, self.work_dir / "sandbox",
                                               require_full=self.req.require_isolation, level=level)
        if self.sandbox.report.warning:
            self._say("WARNING: " + self.sandbox.report.warning)
        if self.sandbox.level.value == "none" or self.stub_url:  # no pid namespace takes helpers down
            self.supervisor.watchdog = Watchdog.start()
        if self.stub_url:  # the stub stands for an outside endpoint: a plain supervised process
            with _quiet_sandbox_log():  # not a server: its "not enforced" warning would mislead
                self.host_launcher = await Sandbox.start(policy, self.work_dir / "host", level="none")

    async def _assign_ports(self, merged: MergedConfig) -> tuple[dict[str, tuple[str, int]], tuple[str, int]]:
        explicit = {n: i.port for n, i in merged.instances.items() if i.port}
        none_level = self.sandbox.level.value == "none"
        servers_addr = self._servers_sock.getsockname()[:2]
        taken = {self.head_addr[1], servers_addr[1], *explicit.values()}
        if self.stub_url:
            taken.add(int(self.stub_url.rsplit(":", 1)[1].split("/")[0]))
        if none_level:  # servers share the host network: a taken explicit port fails now (C04)
            for n, p in explicit.items():
                check_free(merged.instances[n].host or "127.0.0.1", p, n)

        self._taken = taken
        out = {n: (i.host or "127.0.0.1", explicit.get(n) or self._fresh()) for n, i in merged.instances.items()}
        # servers reach the head server on a listener of its own, which serves them Gym's read-only routes only
        head_inside = await self.sandbox.expose_host_service(self._fresh() if not none_level else servers_addr[1],
                                                             *servers_addr)
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
        m = self.supervisor.members[name]
        m.port = self._fresh()
        m.public = (m.host, m.port)
        self.addresses[name] = (self.addresses[name][0], m.port)
        inside = contract.config_view(self.merged.data, self.addresses, self.head_inside, self.ray_inside)
        for s in self.supervisor.members.values():
            if s.kind == "server":
                s.spec.private_env = contract.private_env(contract.server_config_yaml(inside, self.merged.secrets,
                                                                                     s.name))
        public = {n: s.public for n, s in self.supervisor.members.items() if s.kind == "server"}
        self.outside = contract.config_view(self.merged.data, public, self.head_addr, self.ray_inside)

    def _member(self, name: str, kind: str, spec: Any, launcher: Any, port: int | None, **kw: Any) -> Member:
        log = LogSink(self.logs_dir / f"{name}.log", self.req.options.log_tail_lines, self.req.options.log_max_bytes)
        m = Member(name, kind, spec, launcher, log, port=port, **kw)
        self.supervisor.add(m)
        return m

    def _add_server(self, name: str, inst: Any, python: Path, config_yaml: str, addr: tuple[str, int]) -> None:
        from sandbox import ProcessSpec

        wd = self.work_dir / "servers" / name
        wd.mkdir(parents=True, exist_ok=True)
        sdir = Path(inst.server_dir.path)
        cache = self.bytecode.user(python, f"{inst.server_type}/{inst.implementation} {sdir}", name)
        env = {**contract.server_env(name, sdir, python, wd, self.settings.environ), **cache.env}
        if self.ray.mode == "local":  # drivers of our private head agree with it on the loopback node address
            env.update(ray_head.LOOPBACK_ENV)
        if self.ray.mode != "none":  # its Ray tasks run in its venv with its PYTHONPATH (ray_workers.py)
            env.update(ray_workers.job_env(sdir, python))
        spec = ProcessSpec(name, [str(python), inst.entrypoint], sdir, env,
                           read_only_paths=[sdir.parent.parent, python.parent.parent, *contract.trust_paths(env)],
                           writable_paths=[wd, *self._ray_dirs(), *cache.writable],
                           private_env=contract.private_env(config_yaml), limits=self._limits())
        self._member(name, "server", spec, self.sandbox, addr[1], host=addr[0], auto_port=not inst.port,
                     info={"server_type": inst.server_type, "implementation": inst.implementation,
                           "config_path": name, "dir_path": str(sdir), "entrypoint": inst.entrypoint})

    def _limits(self) -> Any:
        """Each server's resource limits (docs/runtime.md, "Resource limits"; settings)."""
        from sandbox import ResourceLimits

        return ResourceLimits(memory_mb=self.settings.server_memory_mb, pids=self.settings.server_pids)

    def _add_stub_member(self, port: int) -> None:
        from sandbox import ProcessSpec

        root = str(Path(__file__).resolve().parents[2])
        served = self.merged.data.get("policy_model_name") or job_policy.STUB_MODEL_NAME  # what servers ask for
        argv = [sys.executable, "-m", "gym_runtime.stub_model", "--host", "127.0.0.1", "--port", str(port),
                "--seed", str(self.req.stub_seed), "--model", served]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": root, "PYTHONUNBUFFERED": "1",
               "HOME": str(self.work_dir), "LANG": "C.UTF-8"}
        key = self.merged.data.get("policy_api_key")
        if isinstance(key, str) and key:  # like a real endpoint, it refuses requests without the job's key
            env["STUB_MODEL_API_KEY"] = key
        m = self._member("stub_model", "model", ProcessSpec("stub_model", argv, self.work_dir, env),
                         self.host_launcher, port, probe_path="/v1/models", wave=0,
                         info={"server_type": "stub_model", "implementation": "gym_runtime.stub_model"})
        m.public = ("127.0.0.1", port)

    def _add_ray_member(self, pythons: dict[str, Path]) -> str:
        """ONE private Ray head inside the sandbox network (servers reach it on loopback); see
        :mod:`gym_runtime.supervise.ray_head`. Returns the GCS address servers get."""
        from sandbox import ProcessSpec

        port = self._fresh()
        self.ray_tmp = tmp = ray_head.make_temp_dir()
        ray_bin = ray_head.ray_binary(pythons[n] for n in self.ray.needed_by)
        venvs = sorted({p.parent.parent for p in pythons.values()})  # Ray workers run server venvs' Pythons
        trees = ray_workers.head_read_only_paths(Path(i.server_dir.path) for i in self.merged.instances.values())
        env, writable = ray_head.head_env(ray_bin, tmp), [tmp]
        if ray_bin.parent.parent in venvs:  # the daemon's own Ray (no server venv has one) keeps its bytecode
            cache = self.bytecode.user(ray_bin.parent / "python", RAY_HEAD, "ray_head")
            env, writable = {**env, **cache.env}, [tmp, *cache.writable]
        spec = ProcessSpec("ray_head", ray_head.head_argv(ray_bin, port, tmp, [self._fresh() for _ in range(len(ray_head.PORT_FLAGS) + 1)]), tmp, env,
                           read_only_paths=[ray_bin.parent.parent, *venvs, *trees], writable_paths=writable)
        self._member("ray_head", "ray", spec, self.sandbox, port, probe_path="log:" + ray_head.READY_TEXT,
                     kill_on_stop=True,
                     info={"server_type": "ray", "implementation": f"ray ({ray_bin})"})
        return f"127.0.0.1:{port}"

    def _ray_dirs(self) -> list[Path]:
        """Ray's session dirs servers must reach (raylet sockets): ours, or a joined local cluster's."""
        if self.ray_tmp is not None:
            return [self.ray_tmp]
        if self.ray.mode == "join" and ray_head.DEFAULT_TEMP_DIR.is_dir():
            return [ray_head.DEFAULT_TEMP_DIR]
        return []

    async def _publish(self) -> None:
        for m in self.supervisor.members.values():
            if m.public is None and m.port is not None:
                m.public = tuple(await self.sandbox.publish(m.port))

    async def _start_head(self, sock: Any) -> None:
        from gym_runtime.head.app import HeadBackend, create_app
        from gym_runtime.head.server import HeadServer
        from gym_runtime.rollouts.verdict import agent_facts

        backend = HeadBackend(config_yaml=lambda: contract.to_yaml(self.merged.secrets.view(self.outside))
                              if self.outside else None,
                              instances=lambda: head_view.instances(self), health=self.health,
                              logs=lambda name, n: head_view.logs(self, name, n),
                              agents=lambda: {n: m.url for n, m in self.supervisor.members.items()
                                              if m.info.get("server_type") == "responses_api_agents" and m.url},
                              agent_facts=lambda: agent_facts(self.merged.instances, ranges=False),
                              processes=lambda: processes.of_environment(self.supervisor,
                                                                         (self.sandbox, self.host_launcher)))
        servers_port = self._servers_sock.getsockname()[1]
        self.head = HeadServer(create_app(backend, servers_ports={servers_port}), sock, [self._servers_sock])
        await self.head.start()

    def health(self) -> tuple[int, dict[str, Any]]:
        """``GET /health`` of this environment, from any phase (:func:`head_view.health`)."""
        return head_view.health(self)

    # ------------------------------------------------------------------ stop
    async def stop(self, fast: bool = False) -> int:
        """Stop everything started so far, from any phase (TERM, grace, KILL, reap); returns the
        exit code. Safe to call again (waits for the first stop); ``fast`` KILLs every process
        group at once, also while an earlier stop is waiting out the grace period."""
        sup = self.supervisor
        if self._stopped is not None:
            if fast and sup._loop_task is not None:
                sup.request_stop(fast=True)
            return await asyncio.shield(self._stopped)
        self._stopped = asyncio.get_running_loop().create_future()
        try:
            code = await self._teardown(fast)
        except BaseException as e:
            self._stopped.set_exception(e)
            raise
        self._stopped.set_result(code)
        return code

    async def _teardown(self, fast: bool) -> int:
        """Undo every stage in reverse, each a bounded, named step (teardown.py): an overrun is
        said with what it waited on, the later steps still run, and the exit code becomes 3."""
        sup, grace = self.supervisor, self.req.options.shutdown_grace_s
        td = Teardown(self._say, lambda: set(sup._pgids), max(HARD_DEADLINE_S, grace + 10.0))
        td.arm()
        self._stopping.set()
        self.cancel.set()
        code = 0
        try:
            task = self._start_task
            if task is not None and not task.done() and task is not asyncio.current_task():
                task.cancel()
                await td.step("start-up", asyncio.gather(task, return_exceptions=True), 10.0,
                              lambda: f"phase {self.phase!r}")
            if self.head is not None:  # batches end with GR-ROLLOUT-SHUTDOWN, not with their agents' deaths
                await td.step("rollout batches", self.head.close_batches(), 4.0, lambda: "open /rollouts/run answers")
            if sup._loop_task is not None:
                sup.request_stop(fast)
                code = await td.step("servers", sup.wait_stopped(), (0 if fast else grace) + 8.0, sup.running)
            if self.head is not None:
                await td.step("head server", self.head.stop(), 5.0, lambda: "uvicorn's open connections")
            else:
                for listener in (self._head_sock, self._servers_sock):
                    if listener is not None:
                        listener.close()
            for name, sb in (("sandbox (forwards, proxy, netns holder)", self.sandbox),
                             ("stub model launcher", self.host_launcher)):
                if sb is not None:
                    await td.step(name, sb.close(), 5.0, lambda sb=sb: f"{len(sb.processes)} process handle(s)")
            if sup.watchdog is not None:
                await td.step("watchdog", asyncio.to_thread(sup.watchdog.close), 4.0, lambda: "the watchdog's exit")
                sup.watchdog = None
            for m in sup.members.values():
                m.log.close()
            await td.step("bytecode compiler", self.bytecode.close(), 2.0, lambda: "its compiler processes")
            ray_head.remove_temp_dir(self.ray_tmp)
        finally:
            td.disarm()
        if not td.clean:
            self._say("unclean stop: " + "; ".join(f"{o.step} ({o.waiting_on})" for o in td.overruns))
        return (code or 0) if td.clean else (code or UNCLEAN_EXIT_CODE)
