"""The per-environment sandbox: network namespace + proxy + forwards + sandboxed processes (docs/architecture.md §6).

The module is long because one object owns the environment sandbox's whole lifetime (the network
namespace, the proxy, the forwards and every sandboxed process), and its start and its teardown
undo each other step by step; split over files, that order would no longer be read in one place.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from gym_runtime.errors import IsolationError, StartError

from . import treecopy
from .dns import NameForwards
from .launch import LOOPBACK_HOSTS, SANDBOX_HOSTNAME, ProcessSpec, bwrap_argv, launcher_argv, make_preexec, private_pipe
from .limits import CgroupSlot
from .netns import NetnsHolder
from .policy import EgressPolicy, parse_ip_literal
from .probe import IsolationLevel, IsolationReport, interpreter_roots, probe_isolation
from .process import SandboxedProcess
from .proxy import EgressProxy, Resolver, connect_or_close, host_dial, serve_forward, system_resolve
from .zygote import Zygote, parent_groups, start_parents

log = logging.getLogger("sandbox")
MAX_DENIALS = 1000
PORT_RANGE = range(20000, 32768)  # below Linux's ephemeral range, so client sockets never collide
_HINT = (
    "run where unprivileged user namespaces are allowed (user.max_user_namespaces > 0, no AppArmor/seccomp "
    "block), with an unmasked /proc (Kubernetes: procMount: Unmasked) and bubblewrap available"
)


class Sandbox:
    """One environment's sandbox. Create with ``await Sandbox.start(...)``; see the package docstring."""

    def __init__(
        self,
        policy: EgressPolicy,
        work_dir: Path,
        report: IsolationReport,
        level: IsolationLevel,
        resolver: Resolver | None,
    ) -> None:
        self.policy = policy
        self.work_dir = Path(work_dir)
        self.report = report
        self.level = level
        self.resolver = resolver
        self.denials: list[dict] = []  # the most recent MAX_DENIALS; denial_count counts all
        self._denial_count = 0
        self._proxy_ports: dict[str, int] = {}
        self.processes: list[SandboxedProcess] = []
        self.holder: NetnsHolder | None = None
        self.bwrap: str | None = None
        self.proc_mode = "mount"
        self.hostname: str | None = None  # the UTS namespace's own name (launch.SANDBOX_HOSTNAME) or None: the host's
        self._servers: list[asyncio.AbstractServer] = []
        self._published: dict[int, tuple[str, int]] = {}
        self._reserved: set[int] = set()
        self._next_port = PORT_RANGE.start
        self._endpoint_addrs: dict[str, str] = {}
        self._proxy = EgressProxy(policy, self._on_deny, resolver, self._loopback_dial)
        self._watch: asyncio.Task | None = None
        self._pending: list[asyncio.Task] = []
        self._dns: NameForwards | None = None  # allowed names for clients that ignore proxies (dns.py)
        self._resolv: dict[str, Path] = {}
        self._dns_tasks: list[asyncio.Task] = []
        self._state = Path(tempfile.mkdtemp(prefix="sandbox-", dir=self.work_dir))
        self._trees: dict[str, treecopy.TreeCopy] = {}  # server -> the copy of its tree it runs from (no bubblewrap)
        self._fresh_trees: dict[str, treecopy.TreeCopy] = {}  # made by prepare() for a first start
        self._tree_count = 0
        self._parents: dict[str, Zygote] = {}  # interpreter -> its venv's preloaded parent (zygote.py)

    # ---------------------------------------------------------------- start / stop
    @classmethod
    async def start(
        cls,
        policy: EgressPolicy,
        work_dir: Path,
        require_full: bool = False,
        level: IsolationLevel | str | None = None,
        resolver: Resolver | None = None,
    ) -> Sandbox:
        """Probe (cached), pick the level (``level`` forces a lower one), start the namespace holder
        and the endpoint forwards. Call from the event-loop thread. Raises IsolationError when
        ``require_full`` and the level is below full, or when ``level`` is above what the host allows."""
        report = await asyncio.to_thread(probe_isolation)
        chosen = report.level if level is None else IsolationLevel(level)
        if chosen.rank > report.level.rank:
            raise IsolationError(
                f"isolation level {chosen.value!r} requested but this host allows only {report.level.value!r}",
                cause="; ".join(report.reasons),
                hint=_HINT,
            )
        if require_full and chosen != IsolationLevel.FULL:
            why = "; ".join(report.reasons) or f"level forced to {chosen.value}"
            raise IsolationError(
                f"full isolation required (--require-isolation) but only {chosen.value!r} is available",
                cause=why,
                hint=_HINT,
            )
        Path(work_dir).mkdir(parents=True, exist_ok=True)
        sb = cls(policy, Path(work_dir), report, chosen, resolver)
        if chosen != report.level:
            sb.report = IsolationReport(chosen, report.reasons + [f"level forced to {chosen.value}"], report.details)
        if sb.report.warning:
            log.warning(sb.report.warning)
        try:
            await sb._setup()
        except BaseException:
            await sb.close()
            raise
        return sb

    async def _setup(self) -> None:
        if self.level == IsolationLevel.NONE:
            return
        self.holder = NetnsHolder.start()
        self._dns = NameForwards(self.policy, self._on_deny, self.holder.listen, self.resolver, subnet=2)
        if self.report.details.get("bwrap") and self.report.details.get("proc"):
            # partial (probed or forced) = the masked-/proc fallback: pid ns kept, host /proc bound read-only
            self.bwrap = self.report.details["bwrap"]
            self.proc_mode = "mount" if self.level == IsolationLevel.FULL else "bind"
        self.hostname = self.report.details.get("hostname", SANDBOX_HOSTNAME) if self.bwrap else None
        hosts = list(LOOPBACK_HOSTS)
        if self.hostname is None:  # no UTS name of its own: the server keeps the host's name, which resolves here
            hosts[0] += f" {socket.gethostname()}"
        for host, port in self.policy.endpoints:
            if parse_ip_literal(host) is not None:
                addr = host
                if not (addr.startswith("127.") or addr == "::1"):
                    self.holder.add_address(addr)
            else:
                addr = self._endpoint_addrs.setdefault(host, f"127.0.1.{len(self._endpoint_addrs) + 1}")
                hosts.append(f"{addr} {host}")
            await self._forward_into(addr, port, host, port)
            self._reserved.add(port)
        (self._state / "hosts").write_text("\n".join(hosts) + "\n")
        (self._state / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")

    async def close(self) -> None:
        """Stop every process (KILL, no grace), the forwards, the proxy and the holder. Idempotent."""
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        for p in self.processes:  # a preloaded parent first: its servers end with its pid namespace
            if p.poll() is None:
                p.kill_now()
                await p.wait()
            if p.cgroup is not None:
                p.cgroup.remove()
        for z in self._parents.values():
            z.close()
        self._parents.clear()
        for t in self._pending:
            try:
                self._servers.append(await t)
            except Exception:
                pass
        self._pending.clear()
        for s in self._servers:
            s.close()
        self._servers.clear()
        for t in self._dns_tasks:
            t.cancel()
        if self._dns is not None:
            self._dns.close()
        if self.holder is not None:
            self.holder.close()
            self.holder = None
        self._trees.clear()
        self._fresh_trees.clear()
        await asyncio.to_thread(treecopy.remove, self._state / "trees")

    # ---------------------------------------------------------------- networking
    def _on_deny(self, event: dict) -> None:
        event["time"] = time.time()
        self._denial_count += 1
        self.denials.append(event)
        if len(self.denials) > MAX_DENIALS:
            del self.denials[: len(self.denials) - MAX_DENIALS]

    @property
    def denial_count(self) -> int:
        """How many connections the proxy refused (403) so far."""
        return self._denial_count

    async def _loopback_dial(self, ip: str, port: int) -> socket.socket:
        if self.holder is None:
            return await host_dial(ip, port)
        return await connect_or_close(self.holder.socket(6 if ":" in ip else 4), ip, port)

    async def _forward_into(self, inside_ip: str, inside_port: int, host: str, port: int) -> None:
        """Listen at inside_ip:inside_port in the netns; splice each connection to host:port (daemon side)."""
        assert self.holder is not None
        sock = self.holder.listen(inside_ip, inside_port)

        async def dial() -> socket.socket:
            literal = parse_ip_literal(host)
            if literal is not None:
                return await host_dial(str(literal), port)
            out = self.resolver(host) if self.resolver is not None else await system_resolve(host)
            addrs = list(await out) if isinstance(out, Awaitable) else list(out)
            return await host_dial(addrs[0], port)

        self._servers.append(await serve_forward(sock, dial))

    def allocate_port(self) -> int:
        """A free port for a server inside the sandbox network: sequential from 20000 (below the
        ephemeral range), checked bindable in the netns, never a forward or an earlier allocation.
        At level none: a host port from the kernel (bind-0; a small race remains)."""
        if self.holder is None:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            self._reserved.add(port)
            return port
        while self._next_port < PORT_RANGE.stop:
            port, self._next_port = self._next_port, self._next_port + 1
            if port not in self._reserved and self.holder.port_free(port):
                self._reserved.add(port)
                return port
        raise StartError("no free port left in the sandbox network (20000-32767)")

    async def publish(self, port: int, host: str = "127.0.0.1") -> tuple[str, int]:
        """Host-side address reaching 127.0.0.1:port inside, listening on ``host`` (an IPv4
        address of this host: a Ray node publishes on its node address); cached per port;
        identity at level none."""
        if self.holder is None:
            return ("127.0.0.1", port)
        if port not in self._published:
            lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            lsock.bind((host, 0))
            lsock.listen(512)
            lsock.setblocking(False)
            self._servers.append(await serve_forward(lsock, lambda: self._loopback_dial("127.0.0.1", port)))
            self._published[port] = lsock.getsockname()[:2]
        return self._published[port]

    async def expose_host_service(self, inside_port: int, host: str, port: int) -> tuple[str, int]:
        """Make host:port (a daemon-side service, e.g. the head server) reachable inside at
        127.0.0.1:inside_port. Returns the address servers must use: ``("127.0.0.1", inside_port)``
        at full/partial, ``(host, port)`` unchanged at none."""
        if self.holder is None:
            return (host, port)
        await self._forward_into("127.0.0.1", inside_port, host, port)
        self._reserved.add(inside_port)
        return ("127.0.0.1", inside_port)

    async def expose_inside(self, dial: Callable[[], Awaitable[socket.socket]]) -> tuple[str, int]:
        """A new listener servers reach (``127.0.0.1:port`` inside the sandbox network; on the host at
        level none) whose every connection is spliced to ``dial()`` (e.g. a task sandbox's service
        port); closed with the sandbox. Returns its address."""
        if self.holder is not None:
            sock = self.holder.listen("127.0.0.1", 0)
        else:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sock.bind(("127.0.0.1", 0))
            sock.listen(512)
            sock.setblocking(False)
        port = sock.getsockname()[1]
        self._reserved.add(port)
        self._servers.append(await serve_forward(sock, dial))
        return ("127.0.0.1", port)

    def proxy_env(self, proxy_port: int) -> dict[str, str]:
        """The variables the sandbox adds: HTTP(S)_PROXY both cases, NO_PROXY listing peers explicitly."""
        url = f"http://127.0.0.1:{proxy_port}"
        peers = ["localhost", "127.0.0.1", "::1"]
        for host, _ in self.policy.endpoints:
            # at level none a hostname endpoint goes through the proxy (which resolves it), never local DNS
            if self.holder is not None or parse_ip_literal(host) is not None:
                peers.append(host)
        peers += list(self._endpoint_addrs.values())
        no_proxy = ",".join(dict.fromkeys(peers))
        return {
            "HTTP_PROXY": url,
            "HTTPS_PROXY": url,
            "http_proxy": url,
            "https_proxy": url,
            "NO_PROXY": no_proxy,
            "no_proxy": no_proxy,
        }

    # ---------------------------------------------------------------- processes
    def _spawn_sync(self, spec: ProcessSpec, proxy_port: int) -> SandboxedProcess:
        spec = self._from_tree_copy(spec)
        env = {**spec.env, **self.proxy_env(proxy_port)}
        cg = CgroupSlot(spec.name, spec.limits)
        join = None
        resolv = self._resolv.get(spec.name, self._state / "resolv.conf")
        if (holder := self.holder) is not None:
            files = {str(self._state / "hosts"): "/etc/hosts", str(resolv): "/etc/resolv.conf"}
            join = holder.preexec_join if self.bwrap else lambda: holder.preexec_join_bare(files)
        ro = [*spec.read_only_paths, *interpreter_roots(spec.argv[0])]
        uncovered = [p for p in spec.cow_paths if spec.tree is None or Path(p) != Path(spec.tree)]
        if uncovered and self.bwrap is None:  # the tree's own copy is its writable view (treecopy.py)
            log.warning(
                "server %s: no copy-on-write view of %s without bubblewrap (isolation %s)",
                spec.name,
                ", ".join(uncovered),
                self.level.value,
            )
        fd, rest = None, None
        if self.bwrap is not None:
            command = list(spec.argv)
            if spec.private_env:  # never in bubblewrap's environment: a pipe to the launcher (launch.py)
                fd, rest = private_pipe(spec.private_env)
                command = launcher_argv(spec.argv, fd)
            argv = bwrap_argv(
                self.bwrap, spec, self.proc_mode, ro, self._state / "hosts", resolv, command, self.hostname
            )
        else:
            argv = list(spec.argv)
            env.update(spec.private_env)  # the process started is the server itself
        # never on a command line (see sandbox/launch.py). Every level gets its own session and
        # process group, so a terminal's SIGINT (sent to the daemon's foreground group) reaches
        # the daemon only, which then stops its servers in order
        parent = self._parent_of(spec)
        if parent is not None:
            why = parent.covers(spec)
            if why is None:
                try:
                    return self._fork(parent, spec, env, resolv, cg)
                except StartError as e:  # this parent forks nothing more; the server starts the usual way
                    parent.broken = e.message
                    log.warning("server %s starts on its own: %s", spec.name, e.message)
            else:
                log.info("server %s starts on its own: %s", spec.name, why)
        try:
            popen = subprocess.Popen(
                argv,
                cwd=str(spec.cwd),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=spec.stdout_fd,
                stderr=spec.stderr_fd,
                close_fds=True,
                start_new_session=True,
                pass_fds=(*spec.pass_fds, *(() if fd is None else (fd,))),
                preexec_fn=make_preexec(spec.limits, cg.procs_files, join, os.getpid()),
            )
        except (OSError, subprocess.SubprocessError) as e:
            cg.remove()
            if rest is not None:  # ends on EPIPE once the read end is closed, closing the write end
                rest.start()
            raise StartError(
                f"server {spec.name!r} could not be started in the sandbox: {e}",
                hint=f"argv[0]={spec.argv[0]!r} must be an absolute interpreter path",
            ) from e
        finally:
            if fd is not None:
                os.close(fd)
        if rest is not None:
            rest.start()
        proc = SandboxedProcess(spec.name, popen, spec.limits, cg, self.bwrap is not None)
        self.processes.append(proc)
        if (spec.limits.memory_mb and not cg.enforces_memory) or (spec.limits.pids and not cg.enforces_pids):
            self._ensure_watcher()
        return proc

    def _fork(
        self, parent: Zygote, spec: ProcessSpec, env: dict[str, str], resolv: Path, cg: CgroupSlot
    ) -> SandboxedProcess:
        """Server ``spec`` forked from its venv's preloaded parent (sandbox/zygote.py); raises
        StartError when the fork failed (nothing of it runs: it never reached its cgroups)."""
        child = parent.fork(spec, env, resolv if self.holder is not None else None, cg.procs_files)
        proc = SandboxedProcess(spec.name, child, spec.limits, cg, False)  # type: ignore[arg-type]  # a ForkedChild has the Popen methods SandboxedProcess uses
        child.on_exit = proc.poll
        self.processes.append(proc)
        if (spec.limits.memory_mb and not cg.enforces_memory) or (spec.limits.pids and not cg.enforces_pids):
            self._ensure_watcher()
        return proc

    @property
    def helpers(self) -> dict[int, str]:
        """Its own processes that are no server's, by pid: the netns holder and the preloaded parents."""
        out = {self.holder.pid: "netns holder"} if self.holder is not None else {}
        for z in self._parents.values():
            pid = z.process.app_pid() if z.process is not None else None
            if pid is not None:
                out[pid] = "preloaded parent"
        return out

    def parent_interpreters(self, servers: Mapping[str, tuple[Sequence[str], bool]]) -> list[str]:
        """The interpreters that :meth:`prepare` will give a preloaded parent, for ``servers``
        (name -> argv, copy-on-write tree) that ask for one (the backend interface): those of two
        or more servers that can be forked (:func:`sandbox.zygote.parent_groups`), under bubblewrap
        only; known before any spec is made."""
        return list(parent_groups(servers)[0]) if self.bwrap is not None else []

    def spawn_after(self, spec: ProcessSpec) -> asyncio.Future | None:
        """What must end before ``spec`` is spawned (the backend interface): its venv's preloaded
        parent while it imports, else None."""
        parent = self._parent_of(spec)
        return parent.pending(spec) if parent is not None else None

    def _parent_of(self, spec: ProcessSpec) -> Zygote | None:
        """The preloaded parent of ``spec``'s venv, when it asks for one and there is one."""
        return self._parents.get(str(spec.argv[0])) if spec.preload is not None else None

    async def prepare(self, specs: list[ProcessSpec], say: Callable[[str], None] | None = None) -> list[str]:
        """What to make before the first spawn (the backend interface, sandbox/backends.py): under
        bubblewrap, a preloaded parent per venv whose servers share modules (sandbox/zygote.py;
        it imports them in the background, and ``say`` gets its progress line);
        without it, the private copy of each server's tree (``ProcessSpec.tree``, treecopy.py) for
        its first start, made in a worker thread. Returns the progress lines saying what was made
        and what it cost. Raises StartError ``GR-START-TREE-COPY`` when a tree cannot be copied."""
        if self.bwrap is not None and not self._parents:
            self._parents = start_parents(specs, self.spawn, self.work_dir, self._state, say or log.info)
            return []
        todo = [s for s in specs if s.tree is not None and self.bwrap is None]
        if not todo:
            return []
        made = await asyncio.to_thread(lambda: [(s.name, self._copy_tree(s)) for s in todo])
        self._fresh_trees.update(made)
        return treecopy.summary(self.level.value, made)

    def _copy_tree(self, spec: ProcessSpec) -> treecopy.TreeCopy:
        """A new copy of ``spec.tree`` under the sandbox's state (removed at close)."""
        assert spec.tree is not None  # prepare() copies only specs with a tree
        self._tree_count += 1
        dest = self._state / "trees" / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', spec.name)}-{self._tree_count}"
        try:
            return treecopy.make(spec.tree, spec.tree_root, dest)
        except (OSError, shutil.Error) as e:
            treecopy.remove(dest)
            raise treecopy.failure(spec.name, spec.tree, dest, self.level.value, e) from None

    def _from_tree_copy(self, spec: ProcessSpec) -> ProcessSpec:
        """``spec`` as it runs here: from a fresh copy of its tree without bubblewrap (the one
        prepare() made for a first start, else made now; the previous start's is removed), else as is."""
        if spec.tree is None or self.bwrap is not None:
            return spec
        copy = self._fresh_trees.pop(spec.name, None) or self._copy_tree(spec)
        old = self._trees.get(spec.name)
        if old is not None:
            treecopy.remove(old.top)
        self._trees[spec.name] = copy
        return copy.spec(spec)

    def spawn(self, spec: ProcessSpec) -> SandboxedProcess:
        """Start one server. Must run on the event-loop thread (PDEATHSIG follows the thread).
        Raises StartError when the process cannot be started."""
        loop = asyncio.get_running_loop()
        if spec.name not in self._proxy_ports:  # one proxy listener per server name, kept across restarts
            self._proxy_ports[spec.name] = self._proxy_port_sync(spec.name, loop)
            self._resolver_for(spec.name, loop)
        return self._spawn_sync(spec, self._proxy_ports[spec.name])

    def _proxy_port_sync(self, name: str, loop: asyncio.AbstractEventLoop) -> int:
        # start_server(sock=...) only registers the socket; do it synchronously via the loop's API.
        if self.holder is not None:
            sock = self.holder.listen("127.0.0.1", 0)
        else:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sock.bind(("127.0.0.1", 0))
            sock.listen(512)
            sock.setblocking(False)
        port = sock.getsockname()[1]
        self._reserved.add(port)
        self._pending.append(loop.create_task(self._proxy.serve(sock, name)))
        return port

    def _resolver_for(self, name: str, loop: asyncio.AbstractEventLoop) -> None:
        """A DNS stub address of the server's own (``127.3.0.N``, named by its ``resolv.conf``), so a
        lookup by a client that ignores proxies is answered, and denied, as that server's (dns.py)."""
        if self.holder is None or self._dns is None or len(self._resolv) >= 250:
            return
        addr = f"127.3.0.{len(self._resolv) + 1}"
        sock = self.holder.udp(addr, 53)
        path = self._state / f"resolv-{len(self._resolv) + 1}.conf"
        path.write_text(f"nameserver {addr}\noptions timeout:2 attempts:2\n")
        self._resolv[name] = path
        self._dns_tasks.append(loop.create_task(self._dns.serve(sock, name)))

    def _ensure_watcher(self) -> None:
        if self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(self._watch_limits())

    async def _watch_limits(self, every_s: float = 1.0) -> None:
        """psutil watcher for limits the cgroups do not enforce: kill the tree and mark the reason."""
        while True:
            await asyncio.sleep(every_s)
            for p in self.processes:
                if p.poll() is not None:
                    continue
                lim, cg = p.limits, p.cgroup
                if lim.memory_mb and not (cg and cg.enforces_memory) and p.memory_rss() > lim.memory_mb << 20:
                    p.mark("memory-limit", f"tree RSS over {lim.memory_mb} MB")
                    p.kill_now()
                elif lim.pids and not (cg and cg.enforces_pids) and len(p.tree()) > lim.pids:
                    p.mark("pids-limit", f"more than {lim.pids} processes")
                    p.kill_now()
