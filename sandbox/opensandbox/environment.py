"""The environment's servers on the operator's OpenSandbox server: one sandbox per group of servers,
the servers of one venv (:mod:`.groups`; docs/runtime.md, "Sandbox backends").

:class:`OpenSandboxEnvironment` is what :meth:`OpenSandboxBackend.start` returns and plays the
role :class:`sandbox.Sandbox` plays under the local backend (``allocate_port``, ``publish``,
``expose_host_service``, ``prepare``, ``spawn``, ``close``, ``level``, ``report``,
``processes``, ``denials``). The network it gives servers is the local one's, seen from inside a
sandbox: a server listens on ``127.0.0.1:<its port>`` in its group's sandbox, and its other peers,
the head server and loopback policy endpoints answer at ``127.0.0.1:<their port>`` there too,
through the forwarder of that sandbox (:mod:`.forwarder`: one per sandbox, started with it,
routing every port but its own servers'), which splices each to the daemon's address
(``GYM_RUNTIME_OPENSANDBOX_DAEMON_HOST``): a :class:`~.relay.Relay` per server (to its sandbox's
endpoint) or a TCP forward (head server, policy endpoint). Other policy endpoints are reached
directly, as the sandbox's ``networkPolicy`` allows (:func:`~.spec.network_policy`).

Mounts: what each sandbox gets of the daemon's trees, venvs and work directories is the delivery
mode's (:mod:`.delivery`: host paths, or a shared volume), asked once per create.

Lifecycle: every sandbox is labelled with the run and has a TTL of :data:`~.spec.TTL_S`, renewed
every :data:`~.spec.RENEW_EVERY_S` while the run lives; a group's sandbox is deleted when its
last server has ended or when it is gone (:class:`~.groups.Groups`); :meth:`close` deletes every
sandbox with the run's label.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from gym_runtime.errors import StartError

from ..policy import EgressPolicy, parse_ip_literal
from ..proxy import host_dial, serve_forward
from . import execd
from .creates import ADOPT_EVERY_S, ADOPT_WAIT_S, ENDED, TRIES, CreateGate, adoptable, backoff_s, outcome
from .delivery import delivery_for
from .failures import translate
from .groups import Groups, GroupSpec, group_cpu, start_forwarder, start_parent
from .passes import Passes
from .process import CALL_S, ServerProcess
from .relay import Relay, free_bind
from .service import SandboxService
from .spec import (
    RENEW_EVERY_S,
    TTL_S,
    RunLabels,
    network_policy,
    resource_limits,
    sdk_network_policy,
    sdk_volumes,
)

log = logging.getLogger("sandbox.opensandbox")
logging.getLogger("opensandbox").setLevel(logging.CRITICAL)  # its failures reach the user as GR-OSB-* blocks
PORT_START = 20000
READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Level:
    """The isolation the environment reports (``value``), in the local levels' terms."""

    value: str = "opensandbox"
    rank: int = 3


@dataclass
class Report:
    """What ``up`` says about the isolation: nothing to warn about."""

    level: Level = field(default_factory=Level)
    reasons: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    warning: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level.value, "reasons": self.reasons}


class OpenSandboxEnvironment:
    """Build with ``await OpenSandboxEnvironment.open(service, labels, policy, work_dir)``."""

    def __init__(self, service: SandboxService, labels: RunLabels, policy: EgressPolicy, work_dir: Path) -> None:
        self.service, self.conn, self.labels, self.policy = service, service.conn, labels, policy
        self.work_dir = work_dir
        self.delivery = delivery_for(self.conn)  # how trees, venvs and work directories reach a sandbox
        self.level, self.report = Level(), Report()
        self.processes: list[ServerProcess] = []
        self.denials: list[dict] = []  # the egress sidecar keeps its own; none are seen here
        self.denial_count = 0
        self.holder = None  # no namespace holder on this host
        self.helpers: dict[int, str] = {}  # no process of its own on this host beside the relays (process accounting)
        self.daemon_host = str(self.conn.daemon_host)
        self.policy_wire = network_policy(policy, [self.daemon_host]) if self.conn.egress == "enforced" else None
        if self.policy_wire is None:
            self.report.warning = (
                "EGRESS NOT ENFORCED: GYM_RUNTIME_OPENSANDBOX_EGRESS=unenforced sends no "
                "networkPolicy, so servers reach whatever the sandboxes' network reaches"
            )
        self._next_port = PORT_START
        self._reserved: set[int] = set()
        self._routes: dict[int, tuple[str, int]] = {}  # inside port -> where the daemon answers it
        self._relays: dict[int, Relay] = {}  # a server's port -> its relay
        self._forwards: list[asyncio.AbstractServer] = []
        self._live: dict[str, Any] = {}  # sandbox id -> the SDK's Sandbox
        self.groups = Groups(self._create, self._readied, self.discard)  # which servers share a sandbox
        self._renew: asyncio.Task | None = None
        self.gate = CreateGate(self.conn.creates_in_flight, self.conn.creates_per_s)
        self.passes = Passes(call_s=CALL_S)  # every server's status and log reads, one pass a second
        self.adopted: list[str] = []  # ids of sandboxes whose create failed on the way back, used all the same
        self.unreachable_since: float | None = None  # wall time of the first unanswered call of an outage

    @classmethod
    async def open(
        cls, service: SandboxService, labels: RunLabels, policy: EgressPolicy, work_dir: Path
    ) -> OpenSandboxEnvironment:
        env = cls(service, labels, policy, work_dir)
        for host, port in policy.endpoints:  # loopback endpoints: reached through the daemon
            ip = parse_ip_literal(host)
            if host == "localhost" or (ip is not None and ip.is_loopback):
                await env._forward(port, "127.0.0.1" if host == "localhost" else str(ip), port)
        env._renew = asyncio.get_running_loop().create_task(env._renew_loop())
        return env

    # ------------------------------------------------------------------ the network
    def allocate_port(self) -> int:
        """A port for a server, unique in the environment (each listens in its own sandbox, and
        the forwarder beside every other server listens on it too)."""
        while self._next_port in self._reserved:
            self._next_port += 1
        port, self._next_port = self._next_port, self._next_port + 1
        self._reserved.add(port)
        return port

    async def _forward(self, inside_port: int, host: str, port: int) -> tuple[str, int]:
        sock = socket.socket(socket.AF_INET6 if ":" in self.daemon_host else socket.AF_INET, socket.SOCK_STREAM)
        free_bind(sock)
        sock.bind((self.daemon_host, 0))
        sock.listen(512)
        sock.setblocking(False)
        self._forwards.append(await serve_forward(sock, lambda: host_dial(host, port)))
        self._routes[inside_port] = tuple(sock.getsockname()[:2])
        self._reserved.add(inside_port)
        return self._routes[inside_port]

    async def expose_host_service(self, inside_port: int, host: str, port: int) -> tuple[str, int]:
        """``host:port`` on this host (the head server) answers in every sandbox at
        ``127.0.0.1:inside_port``; returns that address."""
        await self._forward(inside_port, host, port)
        return ("127.0.0.1", inside_port)

    async def publish(self, port: int, host: str = "127.0.0.1") -> tuple[str, int]:
        """The stable address of the server listening on ``port``: its relay on the daemon's
        address (``host`` does not apply: sandboxes and this host's clients must both reach it)."""
        if port not in self._relays:
            relay = Relay(f"port {port}")
            self._relays[port] = relay
            self._routes[port] = await relay.start(self.daemon_host)
        return self._routes[port]

    def routes_for(self, spec: Any) -> list[list[Any]]:
        """The forwarder's routes in group ``spec``'s sandbox: every inside port but its servers' own."""
        return [[p, h, hp] for p, (h, hp) in sorted(self._routes.items()) if p not in set(spec.ports)]

    def relay_for(self, spec: Any) -> Relay:
        if not spec.ports or spec.ports[0] not in self._relays:
            raise StartError(
                f"server {spec.name!r} has no published port under the opensandbox backend",
                code="GR-OSB-PORT",
                hint="a server must listen on the port its config names",
            )
        return self._relays[spec.ports[0]]

    # ------------------------------------------------------------------ sandboxes
    async def _create(self, spec: GroupSpec) -> Any:
        """A new sandbox for the group ``spec``: its image, labels, TTL, limits, network policy and mounts."""
        from opensandbox import Sandbox

        mounts = await asyncio.to_thread(self.delivery.mounts, spec)  # a tree's first copy onto a volume is I/O
        if spec.cow_paths:
            log.warning(
                "servers %s: a copy-on-write tree is not available under the opensandbox backend; it is read-only",
                spec.name,
            )
        what = f"creating the sandbox of server {spec.name!r}"
        for attempt in range(TRIES):
            try:
                async with self.gate.slot():
                    box = await self._create_once(Sandbox, spec, mounts)
                break
            except Exception as e:
                err = translate(e, self.conn, what)
                self.answered(err.code != "GR-OSB-UNREACHABLE")
                then = outcome(e, err.code)
                if then == "fail" or attempt == TRIES - 1:
                    raise err from None
                log.info("server %s: create failed (%s), trying again", spec.name, err.cause or err.message)
                await asyncio.sleep(backoff_s(attempt))  # before looking too: the server may still be registering it
                box = await self._adopt(spec) if then == "adopt" else None
                if box is not None:
                    break
        self.answered(True)
        self._live[box.id] = box
        return box

    async def _adopt(self, spec: Any) -> Any:
        """The sandbox a create of ``spec`` whose answer did not come back made all the same (found
        by the server's labels, :func:`~.creates.adoptable`, looked for every
        :data:`~.creates.ADOPT_EVERY_S` for up to :data:`~.creates.ADOPT_WAIT_S`), connected; strays
        beside it are deleted. None when there is none or it does not answer."""
        from opensandbox import Sandbox

        what = f"looking for server {spec.name!r}'s sandbox"
        sid, deadline = None, time.monotonic() + ADOPT_WAIT_S
        while sid is None and time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                infos = await self.service.list_ids(self.labels.metadata(spec.name), what)
                sid, strays = adoptable(infos, list(self._live))
                if strays:
                    with contextlib.suppress(Exception):
                        await self.service.kill(strays, f"deleting stray sandboxes of server {spec.name!r}")
            if sid is None:
                await asyncio.sleep(ADOPT_EVERY_S)
        if sid is None:
            return None
        try:
            box = await Sandbox.connect(
                sid, connection_config=self.conn.sdk_config(), connect_timeout=timedelta(seconds=READY_TIMEOUT_S)
            )
        except Exception as e:
            log.warning("server %s: sandbox %s made by a create that timed out does not answer: %s", spec.name, sid, e)
            with contextlib.suppress(Exception):
                await self.service.kill([sid], f"deleting sandbox {sid}")
            return None
        self.adopted.append(sid)
        log.info("server %s: adopted sandbox %s, made by a create whose answer did not come back", spec.name, sid)
        return box

    async def _create_once(self, sandbox_cls: Any, spec: Any, mounts: list[dict[str, Any]]) -> Any:
        """One ``Sandbox.create`` (the SDK deletes a sandbox whose create failed half-way)."""
        return await sandbox_cls.create(
            self.conn.image,
            timeout=timedelta(seconds=TTL_S),
            ready_timeout=timedelta(seconds=READY_TIMEOUT_S),
            metadata=self.labels.metadata(spec.name),  # commands run in the background: no stream grace to shorten
            resource=resource_limits(spec.limits, group_cpu(self.conn.cpu, len(spec.members))),
            network_policy=sdk_network_policy(self.policy_wire) if self.policy_wire is not None else None,
            volumes=sdk_volumes(mounts),
            connection_config=self.conn.sdk_config(self.conn.create_timeout_s),
        )

    def parent_interpreters(self, servers: Any) -> list[str]:
        """No preloaded parents on this host (the backend interface)."""
        return []

    def spawn_after(self, spec: Any) -> None:
        """Nothing to wait for before a spawn (the backend interface)."""
        return None

    async def prepare(self, specs: list[Any], say: Any = None) -> list[str]:
        """Group the servers (:mod:`.groups`) and create every group's first sandbox, all at once under
        :attr:`gate` (the operator's bound: ``GYM_RUNTIME_OPENSANDBOX_CREATES_IN_FLIGHT`` /
        ``..._CREATES_PER_S``), so a create the server refuses fails the start with its own
        ``GR-OSB-*`` error before any server runs. Before any create, the delivery mode's check
        (:attr:`delivery`, :mod:`.delivery`: a shared volume's trees copied and the volume seen from a
        probe sandbox, one block each way it fails). Then execd's command API is checked in the first
        one (:func:`.execd.check`: ``GR-OSB-EXECD``) and each group's preloaded parent is started.
        Returns the delivery mode's progress line (none for host paths)."""
        said = await self.delivery.check(self, specs)  # a shared volume: seen from a probe sandbox first
        plan = self.groups.plan(specs)

        async def one(key: str, gspec: GroupSpec) -> None:
            self.groups.ready[key] = await self._create(gspec)

        async def parent(box: Any, gspec: GroupSpec) -> None:
            try:
                await start_parent(box, gspec)
            except Exception as e:
                raise translate(e, self.conn, f"starting the preloaded parent of {gspec.name!r}", box.id) from None

        for r in await asyncio.gather(*(one(k, g) for k, g in plan.items()), return_exceptions=True):
            if isinstance(r, BaseException):
                raise r
        if plan:
            key, gspec = next(iter(plan.items()))
            await execd.check(self.service, self.groups.ready[key], gspec.name)  # before any other command
            await asyncio.gather(*(parent(self.groups.ready[k], g) for k, g in plan.items()))
        return said

    async def _readied(self, box: Any, gspec: GroupSpec, fresh: bool) -> None:
        """Before ``box``'s first server: the forwarder; the parent too in one :meth:`prepare` did not make."""
        await start_forwarder(box, gspec, self.routes_for(gspec))
        if fresh:
            await start_parent(box, gspec)

    async def endpoint(self, box: Any, spec: Any) -> str:
        """``host:port/proxy/N`` reaching the server's port in ``box``."""
        try:
            return (await box.get_endpoint(spec.ports[0])).endpoint
        except Exception as e:
            raise translate(e, self.conn, f"asking for the endpoint of server {spec.name!r}", box.id) from None

    async def alive(self, box: Any, unknown: bool | None = False) -> bool | None:
        """Whether ``box`` still runs on the server: False once deleted (404) or in a state it does not
        come back from (:data:`ENDED`: a container killed from outside is ``Failed``); ``unknown``
        when the server does not answer."""
        from opensandbox.exceptions import SandboxApiException

        try:
            mgr = await self.service._mgr()
            info = await mgr.get_sandbox_info(box.id)
            self.answered(True)
            return str(info.status.state) not in ENDED
        except SandboxApiException as e:
            self.answered(True)
            return unknown if e.status_code != 404 else False
        except Exception:
            self.answered(False)
            return unknown

    def answered(self, ok: bool) -> None:
        """Record whether the lifecycle server just answered (:attr:`unreachable_since`)."""
        if ok:
            self.unreachable_since = None
        elif self.unreachable_since is None:
            self.unreachable_since = time.time()

    def outage(self, cause: str, spec: Any) -> tuple[str, str]:
        """The exit (reason, detail) of a server that needs a sandbox while the lifecycle server does
        not answer (``cause``: why, e.g. the ``GR-OSB-UNREACHABLE`` block's message): ``service-lost``
        (the supervisor starts it again, uncounted: docs/runtime.md "Lifecycle") until the outage is
        :attr:`OpenSandboxConnection.outage_s` old, then ``service-gone`` (the server fails, naming
        the service and the servers of server ``spec``'s group: they share the sandbox lost, whichever
        asked first failed); reasons of ``gym_runtime.supervise.member``."""
        group = self.groups.members_of(spec)
        self.answered(False)
        since = self.unreachable_since or time.time()
        at = time.strftime("%H:%M:%S UTC", time.gmtime(since))
        away, setting = time.time() - since, "(GYM_RUNTIME_OPENSANDBOX_OUTAGE_S)"
        what = f"OpenSandbox server unreachable since {at} ({away:.0f}s): {cause}"
        if away < self.conn.outage_s:
            return "service-lost", f"{what}; waiting up to {self.conn.outage_s:g}s for it {setting}"
        shared = f"; the sandbox lost is the one the {len(group)} servers of its venv share ({', '.join(group)})"
        return "service-gone", f"{what}; gave up after {self.conn.outage_s:g}s {setting}" + shared * (len(group) > 1)

    async def discard(self, box: Any) -> None:
        """Delete ``box`` (a server ended in it) and close the SDK's connection to it."""
        if box is None:
            return
        self._live.pop(box.id, None)
        with contextlib.suppress(Exception):
            await self.service.kill([box.id], f"deleting sandbox {box.id}")
        with contextlib.suppress(Exception):
            await box.close()

    def spawn(self, spec: Any) -> ServerProcess:
        """Start server ``spec`` (in the background: its handle reports a failed start as an exit)."""
        proc = ServerProcess(self, spec, spec.stdout_fd)
        self.processes.append(proc)
        return proc

    async def renew_all(self) -> int:
        """One renewal pass: every sandbox of the run (made by :meth:`prepare`, or a server's) gets
        its TTL pushed to now + :data:`~.spec.TTL_S`; returns how many were renewed."""
        return await self.service.renew(list(self._live))

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(RENEW_EVERY_S)
            await self.renew_all()

    async def close(self) -> None:
        """End every server (its sandbox deleted), stop relays and forwards, then delete every
        sandbox with the run's label (what a failed start or a lost handle left). Idempotent."""
        if self._renew is not None:
            self._renew.cancel()
            self._renew = None
        for p in self.processes:
            if p.poll() is None:
                p.kill_now()
        await asyncio.gather(*(p.wait() for p in self.processes), return_exceptions=True)
        await self.passes.close()
        await self.groups.close()
        for relay in self._relays.values():
            await relay.stop()
        self._relays.clear()
        for f in self._forwards:
            f.close()
        self._forwards.clear()
        with contextlib.suppress(Exception):
            left = await self.service.delete_run(self.labels)
            if left:
                log.info("deleted %d sandbox(es) of this run at close: %s", len(left), ", ".join(left))
