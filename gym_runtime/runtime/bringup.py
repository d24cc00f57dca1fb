"""Bring an environment up and down on the running event loop: the stages of ``gym-runtime up``.

Data flows one way (docs/architecture.md §2): Package -> MergedConfig -> venvs -> Sandbox + ports -> members
(stub model, private Ray, servers) -> Supervisor + head server. :class:`Environment` keeps what
each stage returned; :meth:`Environment.stop` undoes them in reverse, from any phase (a stop while
venvs build cancels the build). *Where* the servers run is one seam, the placement
(:mod:`gym_runtime.placement`): this host (``local``) or nodes of a Ray cluster (``ray``); the
stages call it, never a second path of their own. The module is long because one object keeps
what every stage returned, so that a stop undoes them in reverse from any phase; the stages' own
work lives in their rooms.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_runtime.config import MergedConfig, PolicyValues
from gym_runtime.config.url_secrets import mask_url, mask_urls
from gym_runtime.errors import GymRuntimeError, StartError, UsageError
from gym_runtime.host.mode import ROLLOUT_DEADLINE_S, HostMode, bind_in_range
from gym_runtime.inherited import check_open_files
from gym_runtime.package import Package, load_package
from gym_runtime.placement import make_placement
from gym_runtime.placement.local import quiet_sandbox_log
from gym_runtime.policy import probe as policy_probe
from gym_runtime.policy import values as job_policy
from gym_runtime.ray import head as ray_head
from gym_runtime.ray.target import RayTarget, check_given
from gym_runtime.ray.use import release_line
from gym_runtime.settings import RuntimeSettings, check_sandbox_backend
from gym_runtime.supervise import (
    contract,
    env_limit,
    head_view,
    passthrough,
    preflight,
    processes,
    readiness,
    run_mark,
)
from gym_runtime.supervise.interrupted import StartInterrupted
from gym_runtime.supervise.logs import LogSink
from gym_runtime.supervise.member import READY, Member
from gym_runtime.supervise.options import SuperviseOptions
from gym_runtime.supervise.orphans import Watchdog
from gym_runtime.supervise.ports import bind_listener
from gym_runtime.supervise.readiness import model_base_urls, policy_models
from gym_runtime.supervise.supervisor import Supervisor
from gym_runtime.supervise.teardown import HARD_DEADLINE_S, UNCLEAN_EXIT_CODE, Teardown
from gym_runtime.task_sandboxes import bringup as task_sandboxes
from gym_runtime.venvs.env_bytecode import EnvironmentBytecode
from gym_runtime.venvs.pyc_store import PycStore
from sandbox.probe import probe_isolation


@dataclass
class UpRequest:
    """Everything ``up`` was asked for (CLI flags or :class:`gym_runtime.Runtime` arguments)."""

    package: Any  # a directory, or a Package already made (gym_runtime/package/bare.py)
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
    placement: str = "local"
    max_concurrent_rollouts: int | None = None  # rollouts in flight per /rollouts/run batch; None: sized (spread.py)
    host: HostMode | None = None  # host mode (--host-mode): the head server serves from the first moment
    heartbeat_s: float = 15.0  # seconds between the spaces a running /rollouts/run batch writes
    rollout_deadline_s: float | None = None  # a batch's deadline; None: 1800 s in host mode, else 3600 s
    sandbox_backend: str | None = None  # --sandbox-backend; None: the settings' (GYM_RUNTIME_SANDBOX_BACKEND)

    def batch_deadline_s(self) -> float:
        """A ``/rollouts/run`` batch's deadline unless its body says (seconds)."""
        if self.rollout_deadline_s is not None:
            return self.rollout_deadline_s
        return ROLLOUT_DEADLINE_S if self.host is not None else 3600.0

    job_config: tuple[dict[str, Any], str] | None = None  # a config layer over the files (gym_runtime.nemo_gym)


HEAD_DUE_S = 1.0  # at most this long after its listeners are bound, the head server serves (_serve_head)

_RUN_IDS: set[str] = set()
_RUN_IDS_LOCK = threading.Lock()


def _new_run_id() -> str:
    """``YYYYmmdd-HHMMSS-<pid>``, with ``-N`` for this process's second and later environment of the
    same second: environments started at once on one state root (the shards of one host, in one
    process or several) each get their own run directory. Nothing is created here."""
    base = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    with _RUN_IDS_LOCK:
        run_id, n = base, 1
        while run_id in _RUN_IDS:
            n += 1
            run_id = f"{base}-{n}"
        _RUN_IDS.add(run_id)
    return run_id


class Environment:
    """One running environment. ``await start()`` -> the ready info dict (raises a
    :class:`~gym_runtime.errors.GymRuntimeError`); ``await stop(fast)``; ``await wait()`` -> exit code."""

    def __init__(self, req: UpRequest, settings: RuntimeSettings, progress=None) -> None:
        if req.sandbox_backend is not None:  # the flag wins over the variable
            settings = settings.with_overrides(
                sandbox_backend=check_sandbox_backend(req.sandbox_backend, "--sandbox-backend")
            )
        self.req, self.settings = req, settings
        self.backend: Any = None  # the sandbox backend (sandbox/backends.py), made once when start() begins
        self.progress = progress or (lambda msg: None)
        self.phase = "config"
        self.merged: MergedConfig | None = None
        self.ray = RayTarget("none")
        self.egress: Any = None  # sandbox.EgressPolicy, read before any venv build (preflight.py)
        self.ray_inside: str | None = None
        self.stub_url: str | None = None
        self.placement = make_placement(req.placement, self)  # where the servers run
        self.host_launcher: Any = None
        self.supervisor = Supervisor(req.options, self._say, run_mark.owner_of(settings.home))
        self.bytecode = EnvironmentBytecode(self._say, PycStore(settings.bytecode_dir))
        self.head: Any = None  # the HeadServer, once it serves (see _serve_head)
        self.head_url: str | None = None  # its URL, once its listener is bound
        self._spawned = asyncio.Event()  # set once the servers' processes are spawned (start)
        self._deferred: dict[str, asyncio.Task] = {}  # starts waiting for it (_defer), by what they start
        self._begun: set[str] = set()  # those of them that began
        self.task_sandboxes: Any = None  # task_sandboxes.api.TaskSandboxServer, .bringup.ApiListener before (local)
        self.osb_gate: Any = None  # task_sandboxes.osb_gate.OpenSandboxGate (placement local, opensandbox blocks kept)
        self.run_labels: Any = None  # sandbox.opensandbox.spec.RunLabels of this run
        self.outside: dict[str, Any] = {}
        self.ready_info: dict[str, Any] | None = None
        self.failure: GymRuntimeError | None = None  # host mode: why the environment failed for good
        self.failed_phase: str | None = None
        self._routing: Any = None  # rollouts.routing.Routing, once the config is read
        self.on_head = lambda url: None  # called with the head server's URL as soon as it serves
        self.build_state: dict[str, str] = {}  # instance -> its venv build's state (before it has a member)
        self.cancel = threading.Event()
        self._stopping = asyncio.Event()
        self._start_task: asyncio.Task | None = None
        self._head_sock: Any = None
        self._servers_sock: Any = None  # the head server as servers reach it (head/app.py, SERVERS_ROUTES)
        self._stub_sock: Any = None  # the stub model's listening socket, bound when its port is chosen
        self._stopped: asyncio.Future | None = None
        self._t0 = time.monotonic()
        self.run_id = _new_run_id()
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
        preflight.check_flags(self.req.require_isolation, self.req.isolation, self.req.max_concurrent_rollouts)
        host = self.req.host
        if host is not None:  # host mode: GET /health answers before anything else is done (docs/runtime.md)
            await self._serve_head(
                bind_listener(self.req.head_host, self.req.head_port, "head server")
                if self.req.head_port is not None
                else bind_in_range(self.req.head_host, *host.port_range),
                at_once=True,
            )
        await self._open_backend()
        # the host's isolation probe (namespaces and bubblewrap made and run: ~0.05-0.1 s, most of it in
        # subprocesses) runs beside the config's merge; the preflight below reads its cached answer
        probing = asyncio.ensure_future(asyncio.to_thread(probe_isolation))
        package, given, job_config = self.req.package, self.req.policy, self.req.job_config
        if host is not None:  # the host's global config: its policy values and a config layer
            if not isinstance(package, Package):
                package = await asyncio.to_thread(load_package, package)
            given, job_config = host.job.apply(list(package.manifest.config_paths), given)
        # the stub model's port is bound now and held until the stub serves on it: chosen and freed,
        # another process could take it while the venvs build
        self._stub_sock = bind_listener("127.0.0.1", 0, "stub model")
        stub_url = f"http://127.0.0.1:{self._stub_sock.getsockname()[1]}/v1"
        merged, self.stub_url = await job_policy.configure(
            package, self.req.overrides, given, self._say, self.settings, job_config, stub_url=stub_url
        )
        if self.stub_url is None:
            self._stub_sock.close()
            self._stub_sock = None
        from gym_runtime.rollouts.routing import Routing

        self._routing = Routing.from_config(merged)
        self.merged = merged
        if stale := await asyncio.to_thread(run_mark.kill_stale, self.supervisor.owner):  # a killed run's helpers
            self._say(f"stopped {len(stale)} process(es) left by a run whose daemon was killed: {'; '.join(stale)}")
        if gone := await asyncio.to_thread(ray_head.remove_stale_temp_dirs):
            self._say(
                f"removed {len(gone)} Ray temp dir(s) left by runs whose daemon was killed: "
                + ", ".join(map(str, gone))
            )
        self._say(release_line(merged))
        self._say(f"config: {len(merged.instances)} server instance(s): " + ", ".join(merged.instances))
        if self.placement.kind == "local":  # the daemon holds descriptors for each server it runs here
            check_open_files(len(merged.instances))
        passthrough.check(self.settings, merged.instances)
        env_limit.check_config_sizes(merged)
        if self.settings.server_env:
            passed = passthrough.describe(self.settings, merged.instances)
            self._say(
                "variables passed to servers (GYM_RUNTIME_SERVER_ENV, names only): "
                + "; ".join(f"{n}: {passthrough.summary(rows)}" for n, rows in passed.items())
            )
        for w in [*merged.warnings, *self._routing.violations(merged.sources)]:  # up runs no rows itself
            self._say("warning" + w.render())
        check_given(
            self.req.ray_address,
            merged.data.get("ray_head_node_address"),
            self.settings.environ,
            self.backend.ray_scope,
        )
        if self._head_sock is None:
            cfg_head = h if isinstance(h := merged.data.get("head_server"), dict) else {}
            head_port = self.req.head_port if self.req.head_port is not None else cfg_head.get("port", 0)
            await self._serve_head(bind_listener(self.req.head_host, int(head_port or 0), "head server"))
        await probing
        # on Ray nodes each node checks its own isolation; a sandbox service's is not this host's
        here = self.placement.kind == "local" and self.backend.host_isolation
        self.egress = await preflight.check_host(
            self.settings.environ,
            model_base_urls(merged.data),
            self.req.require_isolation and here,
            self.req.isolation if here else None,
        )
        self._say(self.egress.summary())
        task_sandboxes.choose_providers(merged, self.settings, self._say, gate=self.placement.kind == "local")
        self._check_stop()
        self.phase = "building venvs"
        await self.placement.prepare(merged)
        self._check_stop()
        self.phase = "starting sandbox"
        await self.placement.open()
        if here:  # the API serves once the servers are spawned; they are given its address now
            self.task_sandboxes = task_sandboxes.open_service(self)
            self._defer("task-sandbox API", self._serve_task_sandboxes)
        if self.placement.kind == "local" and task_sandboxes.gate_users(merged):
            self.osb_gate = await task_sandboxes.start_gate(self)
        if self.stub_url:
            await self._start_stub_launcher()
        self._check_stop()
        self.phase = "starting servers"
        await self.placement.add_servers(merged)
        if self.stub_url:
            self._add_stub_member(self._stub_sock)
        self.refresh_outside()
        self._say(f"starting {len(merged.instances)} server(s) (isolation: {self.placement.isolation})")
        self.supervisor.phase = "waiting for servers to answer GET /"
        self._check_stop()
        self.bytecode.learn(self.supervisor.ready_or_gone)
        # the deferred starts (_defer) run once the supervisor, made next, has spawned the first wave:
        # its loop task is scheduled after this callback, which only then wakes them
        asyncio.get_running_loop().call_soon(self._spawned.set)
        await self._supervise(merged)
        await asyncio.shield(asyncio.gather(*self._deferred.values()))  # a stop lets a begun start end (_teardown)
        opts = self.req.options
        if opts.probe_policy or opts.model_endpoint_timeout_s > 0:
            self.phase = self.supervisor.phase = "probing the policy model"
            async with readiness.probe_client() as client:
                await policy_probe.run_probes(client, merged.instances, opts.probe_policy, opts.probe_tools, self._say)
        self.phase = self.supervisor.phase = "ready"  # a later failure or /health names no probe long done
        self.ready_info = {
            "status": "ready",
            "head_server": self.head_url,
            "servers": self.placement.servers(),
            "placement": self.placement.kind,
            "isolation": self.placement.isolation,
            "startup_s": round(time.monotonic() - self._t0, 3),
            "gym_release": merged.release.to_dict() if merged.release is not None else None,
            "policy_model": {
                "base_url": mask_urls(merged.data.get("policy_base_url")),
                "stub": self.stub_url is not None,
            },
            "max_concurrent_rollouts": self.max_concurrent_rollouts(),
            "ray": self.ray.to_dict(),
            "logs_dir": str(self.logs_dir),
        }
        return self.ready_info

    async def _supervise(self, merged: MergedConfig) -> None:
        """``supervisor.start`` while reporting a wait for the policy model endpoint(s): once every
        server is ready and an endpoint is not, the phase is :data:`readiness.ENDPOINT_PHASE` with a
        progress line at once and then every 15 s (URL and last probe result); a
        ``GR-START-MODEL-ENDPOINT`` error gets that probe result as its ``cause``."""
        sup, last = self.supervisor, dict[str, str]()

        def waiting() -> list[str]:
            urls = [u for u, s in sup.endpoints.items() if s == "pending"]
            if not urls or sup.state != "starting" or any(m.status != READY for m in sup.members.values()):
                return []
            sup.phase = self.phase = readiness.ENDPOINT_PHASE
            return urls

        async with readiness.probe_client() as client:
            watch = asyncio.create_task(readiness.report_endpoint_wait(client, waiting, self._say, last))
            try:
                await sup.start(model_base_urls(merged.data), policy_models(merged.data))
            except StartError as e:
                if e.code == "GR-START-MODEL-ENDPOINT":
                    urls = {
                        u: readiness.model_probe_url(u) for u, s in sup.endpoints.items() if s in ("failed", "pending")
                    }
                    lines = [
                        f"last probe: GET {mask_url(p)}: {await readiness.probe(client, p) or last.get(u) or 'answered'}"
                        for u, p in urls.items()
                    ]
                    e.cause = "\n".join(lines + ([e.cause] if e.cause else [])) or None
                raise
            finally:
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)

    async def _open_backend(self) -> None:
        """Make the run's sandbox backend from the settings and delete what a daemon of the same
        state slot left on it when it died (before anything is created)."""
        from sandbox.backends import make_backend
        from sandbox.opensandbox.spec import RunLabels

        slot = self.req.work_dir or self.settings.home  # the slot this daemon holds alone (daemon_record.py)
        self.run_labels = RunLabels.new(Path(slot), socket.gethostname())
        backend = make_backend(self.settings.sandbox_backend, self.settings.opensandbox, self.run_labels)
        if self.placement.kind != "local" and backend.name != "local":
            raise UsageError(
                f"--sandbox-backend {backend.name} runs servers on this host's placement only",
                code="GR-USAGE-SANDBOX-BACKEND",
                hint="use --placement local with it, or the local backend with --placement ray",
            )
        self.backend = backend
        reaped = await backend.reap_leftovers()
        if reaped:
            self._say(
                f"sandbox backend {backend.name}: deleted {len(reaped)} sandbox(es) a stopped daemon of this "
                f"state directory left: {', '.join(reaped)}"
            )

    async def _start_stub_launcher(self) -> None:
        """The launcher of the built-in stub model: a plain supervised process on this host (it
        stands for an outside endpoint), watched so it never outlives the daemon."""
        from sandbox import Sandbox

        with quiet_sandbox_log():  # not a server: its "not enforced" warning would mislead
            self.host_launcher = await Sandbox.start(self.egress, self.work_dir / "host", level="none")
        self.supervisor.watchdog = self.supervisor.watchdog or Watchdog.start(self.supervisor.run_mark)

    def refresh_outside(self) -> None:
        """The config as seen from this host (served by the head server): every instance at the
        address the placement gives it."""
        assert self.merged is not None  # read before any server is placed
        self.outside = contract.config_view(self.merged.data, self.placement.public(), self.head_addr, self.ray_inside)

    def agent_replicas(self) -> dict[str, dict[str, str | None]]:
        """Agent instance -> {replica: node} (the placement's, :mod:`gym_runtime.rollouts.spread`)."""
        assert self.merged is not None  # read before any server is placed
        return {
            n: r
            for n, r in self.placement.replica_nodes().items()
            if self.merged.instances[n].server_type == "responses_api_agents"
        }

    def max_concurrent_rollouts(self) -> int:
        """Rollouts in flight per batch: ``--max-concurrent-rollouts``, else sized to the agent replicas."""
        from gym_runtime.rollouts.spread import default_max_rollouts

        return self.req.max_concurrent_rollouts or default_max_rollouts(self.agent_replicas())

    def _member(self, name: str, kind: str, spec: Any, launcher: Any, port: int | None, **kw: Any) -> Member:
        log = LogSink(self.logs_dir / f"{name}.log", self.req.options.log_tail_lines, self.req.options.log_max_bytes)
        m = Member(name, kind, spec, launcher, log, port=port, **kw)
        self.supervisor.add(m)
        return m

    def _add_stub_member(self, sock: socket.socket) -> None:
        """The stub model as a supervised member serving on ``sock`` (bound when its port was chosen;
        each start of the stub inherits it)."""
        from sandbox import ProcessSpec

        assert self.merged is not None  # read before the stub model is added
        root = str(Path(__file__).resolve().parents[2])
        served = self.merged.data.get("policy_model_name") or job_policy.STUB_MODEL_NAME  # what servers ask for
        port = sock.getsockname()[1]
        argv = [
            sys.executable,
            "-m",
            "gym_runtime.stub_model",
            "--fd",
            str(sock.fileno()),
            "--seed",
            str(self.req.stub_seed),
            "--model",
            served,
        ]
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "PYTHONPATH": root,
            "PYTHONUNBUFFERED": "1",
            "HOME": str(self.work_dir),
            "LANG": "C.UTF-8",
        }
        key = self.merged.data.get("policy_api_key")
        if isinstance(key, str) and key:  # like a real endpoint, it refuses requests without the job's key
            env["STUB_MODEL_API_KEY"] = key
        m = self._member(
            "stub_model",
            "model",
            ProcessSpec("stub_model", argv, self.work_dir, env, pass_fds=(sock.fileno(),)),
            self.host_launcher,
            port,
            probe_path="/v1/models",
            wave=0,
            kill_on_stop=True,
            info={"server_type": "stub_model", "implementation": "gym_runtime.stub_model"},
        )
        m.public = ("127.0.0.1", port)

    async def _serve_head(self, head_sock: Any, at_once: bool = False) -> None:
        """Serve the head server on ``head_sock`` (and the servers' own listener, bound here); from
        then on ``status`` sees the phase and each server's state, and ``on_head`` is told its URL.

        Both listeners are bound now, so a client that connects before the head server serves waits
        in the listen backlog. It serves at once with ``at_once`` (host mode: ``GET /health`` from
        the first moment), else once the servers' processes are spawned (:meth:`start`) or
        :data:`HEAD_DUE_S` seconds from now, whichever comes first: its start (Starlette's import, the
        app, uvicorn: ~0.1-0.2 s of the daemon's one thread) then runs beside the preloaded parents'
        imports, or beside a venv build, rather than before them."""
        self._head_sock = head_sock
        self._servers_sock = bind_listener("127.0.0.1", 0, "head server (the servers' listener)")
        self.head_addr = head_sock.getsockname()[:2]
        self.servers_addr = self._servers_sock.getsockname()[:2]  # where servers reach it (placements)
        host, port = self.head_addr
        self.head_url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
        if at_once:
            await self._start_head(head_sock)
        else:
            self._defer("head server", lambda: self._start_head(head_sock), HEAD_DUE_S)
        self._say(f"head server at {self.head_url} (GET /health shows the start-up)")
        self.on_head(self.head_url)

    def _defer(self, what: str, start: Callable[[], Awaitable[None]], within_s: float | None = None) -> None:
        """Run ``start()`` once the servers' processes are spawned (or ``within_s`` seconds from now,
        whichever comes first): a service of the daemon whose listener is bound already, so that
        its start (Starlette's import, its app, uvicorn) runs beside the servers' own start-up (the
        preloaded parents' imports) rather than before it. :meth:`start` waits for every such
        start before the ready line; a stop cancels those that have not begun."""

        async def when_due() -> None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._spawned.wait(), within_s)
            self._begun.add(what)
            await start()

        self._deferred[what] = asyncio.create_task(when_due())

    async def _serve_task_sandboxes(self) -> None:
        self.task_sandboxes = await task_sandboxes.serve(self.task_sandboxes)

    async def _start_head(self, sock: Any) -> None:
        """The head server over this environment; in host mode it starts before the config is read,
        so everything it reads of the config is read per request."""
        from gym_runtime.head.app import HeadBackend, create_app
        from gym_runtime.head.server import HeadServer
        from gym_runtime.rollouts.routing import ROLLOUT_TARGETS
        from gym_runtime.rollouts.verdict import agent_facts

        backend = HeadBackend(
            config_yaml=lambda: (
                contract.to_yaml(self.merged.secrets.view(self.outside)) if self.outside and self.merged else None
            ),
            instances=lambda: head_view.instances(self),
            health=self.health,
            logs=lambda name, n: head_view.logs(self, name, n),
            agents=lambda: {  # None: configured, no address now (GR-ROLLOUT-NOT-RUNNING, infrastructure)
                n: u or None
                for n, u in self.placement.servers().items()
                if self.merged and self.merged.instances[n].server_type in ROLLOUT_TARGETS
            },
            routing=lambda: self._routing,
            agent_facts=lambda: agent_facts(self.merged.instances, ranges=False) if self.merged else {},
            agent_replicas=self.agent_replicas,
            rollout_concurrency=self.max_concurrent_rollouts,
            rollout_deadline_s=self.req.batch_deadline_s(),
            heartbeat_s=self.req.heartbeat_s,
            rollouts_refused=(lambda: head_view.rollouts_refused(self)) if self.req.host else (lambda: None),
            keyed_rows=self.req.host is not None,
            processes=lambda: processes.of_environment(
                self.supervisor,
                (*self.placement.sandboxes(), self.host_launcher),
                self.task_sandboxes.service if self.task_sandboxes is not None else None,
            ),
            **head_view.probe_routes(self.merged.release if self.merged else None),
        )
        servers_port = self._servers_sock.getsockname()[1]
        self.head = HeadServer(create_app(backend, servers_ports={servers_port}), sock, [self._servers_sock])
        await self.head.start()

    def health(self) -> tuple[int, dict[str, Any]]:
        """``GET /health`` of this environment, from any phase (:func:`head_view.health`)."""
        return head_view.health(self)

    # ------------------------------------------------------------------ stop
    async def fail(self, error: GymRuntimeError) -> int:
        """Host mode: the environment failed for good with ``error``: stop everything but the head
        server, which from now on answers ``/health`` with ``failed`` and ``error``'s block (and
        refuses rollout batches with it) until :meth:`close_head`; returns the stop's exit code."""
        self.failure, self.failed_phase = error, self.phase
        return await self.stop(keep_head=True)

    async def close_head(self) -> None:
        """Stop the head server :meth:`fail` kept serving."""
        if self.head is not None:
            await self.head.stop()

    @property
    def stop_under_way(self) -> bool:
        """True once :meth:`stop` was called (it undoes the start itself, waiting for it to leave)."""
        return self._stopped is not None

    async def stop(self, fast: bool = False, keep_head: bool = False) -> int:
        """Stop everything started so far, from any phase (TERM, grace, KILL, reap); returns the
        exit code. Safe to call again (waits for the first stop); ``fast`` KILLs every process
        group at once, also while an earlier stop is waiting out the grace period; ``keep_head``:
        the head server keeps serving (:meth:`fail`)."""
        sup = self.supervisor
        if self._stopped is not None:
            if fast and sup._loop_task is not None:
                sup.request_stop(fast=True)
            return await asyncio.shield(self._stopped)
        self._stopped = asyncio.get_running_loop().create_future()
        try:
            code = await self._teardown(fast, keep_head)
        except BaseException as e:
            self._stopped.set_exception(e)
            raise
        self._stopped.set_result(code)
        return code

    async def _stop_head_after(self, servers_stopped: asyncio.Event) -> None:
        """Stop the head server once every server has stopped, while the Ray head and the stub model
        stop (uvicorn's own shutdown takes 0.1-0.2 s)."""
        await servers_stopped.wait()
        await self.head.stop()

    async def _stop_task_sandboxes_after(self, servers_stopped: asyncio.Event) -> None:
        """Close the task sandboxes and their API once every server has stopped (a server in its
        graceful window may still close its boxes), beside the Ray head, the stub model and the
        head server: its uvicorn's shutdown took 0.2 s of every stop when it ran after them."""
        await servers_stopped.wait()
        await self.task_sandboxes.stop()

    async def _teardown(self, fast: bool, keep_head: bool = False) -> int:
        """Undo every stage in reverse, each a bounded, named step (teardown.py): an overrun is
        said with what it waited on, the later steps still run, and the exit code becomes 3."""
        sup, grace = self.supervisor, self.req.options.shutdown_grace_s
        anything = self._head_sock is not None or bool(sup.members)  # else the start failed before it started anything
        td = Teardown(self._say, lambda: set(sup._pgids), max(HARD_DEADLINE_S, grace + 10.0))
        td.arm()
        self._stopping.set()
        self.cancel.set()
        code = 0
        try:
            task = self._start_task
            if task is not None and not task.done() and task is not asyncio.current_task():
                task.cancel()
                await td.step(
                    "start-up", asyncio.gather(task, return_exceptions=True), 10.0, lambda: f"phase {self.phase!r}"
                )
            for what, t in self._deferred.items():  # a start not begun is dropped (its listener closes below)
                if what not in self._begun:
                    t.cancel()
            if any(not t.done() for t in self._deferred.values()):  # one begun ends first
                await td.step(
                    "services' start",
                    asyncio.gather(*self._deferred.values(), return_exceptions=True),
                    5.0,
                    lambda: ", ".join(w for w, t in self._deferred.items() if not t.done()),
                )
            if self.head is not None:  # batches end with GR-ROLLOUT-SHUTDOWN, not with their agents' deaths
                await td.step("rollout batches", self.head.close_batches(), 4.0, lambda: "open /rollouts/run answers")
            head_stop = boxes_stop = None
            if sup._loop_task is not None:
                sup.request_stop(fast)
                if self.head is not None and not keep_head:  # serves status while the servers stop, then closes
                    head_stop = asyncio.ensure_future(self._stop_head_after(sup.servers_stopped))
                if self.task_sandboxes is not None:
                    boxes_stop = asyncio.ensure_future(self._stop_task_sandboxes_after(sup.servers_stopped))
                code = await td.step("servers", sup.wait_stopped(), (0 if fast else grace) + 8.0, sup.running)
                td.note("servers", sup.stop_split)
            if self.task_sandboxes is not None:
                if boxes_stop is not None and not sup.servers_stopped.is_set():
                    boxes_stop.cancel()  # the servers overran: close them now
                    boxes_stop = None
                await td.step(
                    "task sandboxes",
                    boxes_stop or self.task_sandboxes.stop(),
                    8.0,
                    lambda: f"{len(self.task_sandboxes.service.boxes)} task sandbox(es)",
                )
            if self.osb_gate is not None:
                await td.step(
                    "task sandboxes on the OpenSandbox server",
                    self.osb_gate.stop(),
                    30.0,
                    lambda: f"{len(self.osb_gate.boxes)} task sandbox(es)",
                )
            if keep_head:
                pass
            elif self.head is not None:
                if head_stop is not None and not sup.servers_stopped.is_set():
                    head_stop.cancel()  # the servers overran: close it now
                    head_stop = None
                await td.step("head server", head_stop or self.head.stop(), 5.0, lambda: "uvicorn's open connections")
            else:
                for listener in (self._head_sock, self._servers_sock):
                    if listener is not None:
                        listener.close()
            step, deadline = self.placement.close_step
            await td.step(step, self.placement.close(), deadline, self.placement.open_handles)
            if self.backend is not None:
                await td.step("sandbox backend", self.backend.close(), 5.0, lambda: "its connection")
            if self.host_launcher is not None:
                await td.step(
                    "stub model launcher",
                    self.host_launcher.close(),
                    5.0,
                    lambda: f"{len(self.host_launcher.processes)} process handle(s)",
                )
            if self._stub_sock is not None:
                self._stub_sock.close()
            if sup.watchdog is not None:
                await td.step("watchdog", asyncio.to_thread(sup.watchdog.close), 4.0, lambda: "the watchdog's exit")
                sup.watchdog = None
            for m in sup.members.values():
                m.log.close()
            await td.step("bytecode compiler", self.bytecode.close(), 2.0, lambda: "its compiler processes")
        finally:
            td.disarm()
        if anything or not td.clean:
            self._say(td.summary())
        if not td.clean:
            self._say("unclean stop: " + "; ".join(f"{o.step} ({o.waiting_on})" for o in td.overruns))
        return (code or 0) if td.clean else (code or UNCLEAN_EXIT_CODE)
