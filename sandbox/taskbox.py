"""One task sandbox (a *box*): a keeper's namespaces, the joiner that works in them, its egress.

A box is what a server asks the daemon for to run model-written code (NeMo Gym 0.7.0's Sandbox
API, ``gym_runtime/task_sandboxes/``); the daemon, not the server, makes it, since a server at
isolation ``full`` cannot make namespaces itself. Per box (docs/architecture.md §6, "Task
sandboxes"):

* the keeper (``boxroot.py``) under bubblewrap: own user, pid, ipc, uts, mount and network
  namespaces, the box's root, limits by its cgroup(s) (``limits.py``; CPU by ``cpu.max`` /
  ``cpu.cfs_quota_us`` where writable, else by CPU affinity);
* the joiner (``_joiner.py``), started once: it joins the keeper's namespaces and then starts each
  command in them, copies files in and out with the box's own permissions, and makes the sockets
  the daemon serves inside the box's network (no process of the daemon's own joins a namespace);
* the egress proxy listener inside the box (``proxy.py``, the environment's allowlist without its
  policy endpoints: model-written code has no business with the policy model): commands get
  ``HTTP(S)_PROXY``; every denial names the box's owner and the box.

Every process is spawned by ``spawner``, one long-lived thread (``PR_SET_PDEATHSIG`` follows the
thread that forked, so a box ends with the daemon, never with a short-lived worker thread).
Errors: :class:`BoxError` (``str()`` says what failed, for the service to answer).

The module is long because a box's keeper, joiner, cgroups and egress are made and undone
together, in one order, by one object.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from .boxio import _child_of, _Drain, _kill_group, _kill_tree, _read_info, _reap, _remove_tree
from .boxroot import BoxDirs, BoxRoot, box_bwrap_argv
from .dns import NameForwards
from .joiner import JOINER, START_TIMEOUT_S, BoxError, Joiner, JoinerFactory
from .launch import SANDBOX_HOSTNAME, make_preexec
from .limits import CgroupSlot, ResourceLimits, _own_v1
from .policy import EgressPolicy
from .probe import probe_isolation
from .proxy import EgressProxy

log = logging.getLogger("sandbox.tasks")
EOF_GRACE_S = 2.0  # after a command exits, how long its output pipes may stay open (a process it left)


@dataclass(frozen=True)
class BoxLimits:
    """Limits of one box: ``memory_mb`` (its processes' memory), ``pids`` (processes + threads),
    ``cpus`` (cores, may be fractional); None = no limit."""

    memory_mb: int | None = None
    pids: int | None = None
    cpus: float | None = None


@dataclass(frozen=True)
class ExecOutcome:
    """One command's end. ``returncode`` (None when it never ran: ``error`` says why); a signal N is
    ``128 + N`` as a shell reports it; ``timed_out``: killed at its deadline; ``truncated``: an
    output stream was longer than ``boxio.MAX_OUTPUT`` bytes (16 MiB)."""

    returncode: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    truncated: bool = False
    error: str | None = None


def _cpu_slot(tag: str, cpus: float | None, cg: CgroupSlot) -> tuple[list[str], list[Path], bool]:
    """CPU quota for a box: ``(extra procs files, extra dirs, enforced)`` (v2 ``cpu.max`` in its
    group, v1 a ``cpu`` group of its own); not enforced where neither is writable."""
    if cpus is None:
        return [], [], False
    quota = max(1000, int(cpus * 100_000))
    if cg.mode == "v2" and cg.dirs and (cg.dirs[0] / "cpu.max").exists():
        (cg.dirs[0] / "cpu.max").write_text(f"{quota} 100000")
        return [], [], True
    base = _own_v1("cpu") if cg.mode == "v1" else None
    if base is not None and (base / "cpu.cfs_quota_us").exists():
        d = base / tag
        try:
            d.mkdir()
            (d / "cpu.cfs_period_us").write_text("100000")
            (d / "cpu.cfs_quota_us").write_text(str(quota))
            return [str(d / "cgroup.procs")], [d], True
        except OSError:
            shutil.rmtree(d, ignore_errors=True)
    return [], [], False


class TaskBox:
    """A running box; make one with ``await TaskBox.start(...)``. ``name`` (``owner/box-id``) is
    what denials and logs call it; ``root``, ``limits``, ``workdir``, ``env`` (its commands' base
    environment, proxy variables included), ``enforced`` (which limits the kernel enforces:
    ``memory``, ``pids``, ``cpu``), ``denials`` / ``denial_count``, ``started_at``."""

    def __init__(self, name: str, root: BoxRoot, dirs: BoxDirs, limits: BoxLimits, workdir: str) -> None:
        self.name, self.root, self.dirs, self.limits, self.workdir = name, root, dirs, limits, workdir
        self.env: dict[str, str] = {}
        self.enforced: dict[str, str] = {}
        self.denials: list[dict] = []
        self.denial_count = 0
        self.started_at = time.time()
        self.keeper: subprocess.Popen | None = None
        self.joiner: Joiner | None = None
        self._keeper_w: int | None = None
        self._cg: CgroupSlot | None = None
        self._cpu_dirs: list[Path] = []
        self._servers: list[asyncio.AbstractServer] = []
        self._dns: NameForwards | None = None
        self._closed = False

    # ---------------------------------------------------------------- start
    @classmethod
    async def start(
        cls,
        name: str,
        root: BoxRoot,
        base: Path,
        limits: BoxLimits,
        policy: EgressPolicy,
        spawner: concurrent.futures.Executor,
        bwrap: str,
        proc_mode: str,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        on_deny: Callable[[dict], None] | None = None,
        resolver=None,
        factory: JoinerFactory | None = None,
    ) -> TaskBox:
        """Make a box and return it running; raises :class:`BoxError` (nothing is left then).
        ``factory``: forks its joiner (else a joiner process of its own is started)."""
        dirs = BoxDirs(base)
        dirs.make()
        box = cls(name, root, dirs, limits, workdir or root.default_workdir())
        try:
            await box._start(policy, spawner, bwrap, proc_mode, env or {}, on_deny, resolver, factory)
        except BaseException:
            await box.close()
            raise
        return box

    async def _start(
        self,
        policy: EgressPolicy,
        spawner: concurrent.futures.Executor,
        bwrap: str,
        proc_mode: str,
        env: dict[str, str],
        on_deny,
        resolver,
        factory: JoinerFactory | None = None,
    ) -> None:
        loop = asyncio.get_running_loop()
        tag = f"box-{self.dirs.base.name}"
        self._cg = CgroupSlot(tag, ResourceLimits(self.limits.memory_mb, self.limits.pids))
        cpu_files, self._cpu_dirs, cpu_ok = _cpu_slot(f"gym-runtime-{os.getpid()}-{tag}", self.limits.cpus, self._cg)
        procs = self._cg.procs_files + cpu_files
        self.enforced = {
            k: "cgroup"
            for k, on in (("memory", self._cg.enforces_memory), ("pids", self._cg.enforces_pids), ("cpu", cpu_ok))
            if on
        }
        affinity = None
        if self.limits.cpus is not None and not cpu_ok:
            affinity = sorted(os.sched_getaffinity(0))[: max(1, math.ceil(self.limits.cpus))]
            self.enforced["cpu"] = f"affinity ({len(affinity)} core(s))"
        info_r, info_w = os.pipe()
        keep_r, self._keeper_w = os.pipe()
        os.set_inheritable(info_w, True)
        hostname = probe_isolation().details.get("hostname", SANDBOX_HOSTNAME)  # cached: the probe of this process
        argv = box_bwrap_argv(bwrap, self.root, self.dirs, self.workdir, proc_mode, info_w, hostname=hostname)
        errlog = open(self.dirs.base / "keeper.log", "wb")
        preexec = make_preexec(ResourceLimits(None, None), procs, None, os.getpid())

        def spawn_keeper() -> subprocess.Popen:
            def pre() -> None:
                if affinity:
                    os.sched_setaffinity(0, affinity)
                preexec()

            return subprocess.Popen(
                argv,
                stdin=keep_r,
                stdout=errlog,
                stderr=errlog,
                pass_fds=(info_w,),
                start_new_session=True,
                close_fds=True,
                env={"PATH": "/usr/bin:/bin"},
                preexec_fn=pre,
            )

        try:
            self.keeper = await loop.run_in_executor(spawner, spawn_keeper)
        finally:
            for fd in (info_w, keep_r):
                os.close(fd)
            errlog.close()
        info = await asyncio.wait_for(loop.run_in_executor(None, _read_info, info_r), START_TIMEOUT_S)
        if "child-pid" not in info:
            await loop.run_in_executor(None, self.keeper.wait)
            why = (self.dirs.base / "keeper.log").read_text(errors="replace").strip()[-800:]
            raise BoxError(
                f"the box's keeper did not start (bubblewrap exit {self.keeper.returncode}): {why or 'no output'}"
            )
        keeper_pid = await _child_of(int(info["child-pid"]))
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)

        def spawn_joiner() -> subprocess.Popen:
            def pre() -> None:
                if affinity:
                    os.sched_setaffinity(0, affinity)
                os.setsid()

            return subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    "-B",
                    str(JOINER),
                    str(theirs.fileno()),
                    str(os.getpid()),
                    str(keeper_pid),
                    *procs,
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={},
                preexec_fn=pre,
            )

        try:
            if factory is not None:
                self.joiner = Joiner(None, ours, await factory.fork(keeper_pid, procs, affinity, theirs))
            else:
                self.joiner = Joiner(await loop.run_in_executor(spawner, spawn_joiner), ours)
        finally:
            theirs.close()
        ready = await self.joiner.ready(START_TIMEOUT_S)
        if not ready.get("ready"):
            raise BoxError(f"cannot enter the box's namespaces: {ready.get('error')}")
        reply, fds = await self.joiner.request({"op": "listen", "ip": "127.0.0.1", "port": 0})
        if "error" in reply or not fds:
            raise BoxError(f"no proxy listener in the box: {reply.get('error')}")
        sock = socket.socket(fileno=fds[0])
        sock.setblocking(False)
        note = self._denied(on_deny)
        proxy = EgressProxy(policy, note, resolver)
        self._servers.append(await proxy.serve(sock, self.name))
        url = f"http://127.0.0.1:{reply['port']}"
        reply, fds = await self.joiner.request({"op": "udp", "ip": "127.0.0.1", "port": 53})
        if not fds:
            raise BoxError(f"no resolver socket in the box: {reply.get('error')}")
        self._dns = NameForwards(policy, note, self._listen, resolver, subnet=2)  # for clients that ignore proxies
        dns_sock = socket.socket(fileno=fds[0])
        dns_sock.setblocking(False)
        await self._dns.serve(dns_sock, self.name)
        self.env = {
            **self.root.default_env(),
            "HOME": "/root",
            "LANG": "C.UTF-8",
            **env,
            "HTTP_PROXY": url,
            "HTTPS_PROXY": url,
            "http_proxy": url,
            "https_proxy": url,
            "NO_PROXY": "localhost,127.0.0.1,::1",
            "no_proxy": "localhost,127.0.0.1,::1",
        }

    def _denied(self, on_deny: Callable[[dict], None] | None) -> Callable[[dict], None]:
        def note(event: dict) -> None:
            event["time"] = time.time()
            self.denial_count += 1
            self.denials = [*self.denials[-99:], event]
            if on_deny is not None:
                on_deny(event)

        return note

    # ---------------------------------------------------------------- use
    @property
    def alive(self) -> bool:
        return not self._closed and self.keeper is not None and self.keeper.poll() is None

    async def exec(
        self, argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None, timeout_s: float | None = None
    ) -> ExecOutcome:
        """Run ``argv`` in the box (stdin empty) and collect its output. A command past
        ``timeout_s`` is killed with its process group (``timed_out``). Raises BoxError when the
        box is gone."""
        joiner = self._require()
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            reply, _ = await joiner.request(
                {"op": "exec", "argv": argv, "env": {**self.env, **(env or {})}, "cwd": cwd or self.workdir},
                (null, out_w, err_w),
            )
        except BaseException:
            for fd in (out_r, err_r):
                os.close(fd)
            raise
        finally:
            for fd in (null, out_w, err_w):
                os.close(fd)
        if "error" in reply:
            for fd in (out_r, err_r):
                os.close(fd)
            return ExecOutcome(None, error=reply["error"])
        pid = reply["pid"]
        readers = [_Drain(out_r), _Drain(err_r)]
        done = joiner.exit_of(pid)
        timed_out = False
        try:
            status = await asyncio.wait_for(asyncio.shield(done), timeout_s)
        except TimeoutError:
            timed_out = True
            _kill_group(pid)
            status = await asyncio.wait_for(asyncio.shield(done), 5.0)
        except BaseException:
            _kill_group(pid)
            for r in readers:
                r.close()
            raise
        finally:
            joiner.forget(pid)
        await asyncio.wait([asyncio.ensure_future(r.done) for r in readers], timeout=EOF_GRACE_S)
        (out, t1), (err, t2) = (r.close() for r in readers)
        rc = 128 - status if status < 0 else status
        return ExecOutcome(rc, out, err, timed_out, t1 or t2)

    async def put(self, source: Path, path: str, mode: int = 0o644) -> None:
        """Copy the host file ``source`` to ``path`` in the box (parents made). Raises BoxError."""
        fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
        try:
            reply, _ = await self._require().request({"op": "put", "path": self._abs(path), "mode": mode}, (fd,))
        finally:
            os.close(fd)
        if "error" in reply:
            raise BoxError(reply["error"])

    async def get(self, path: str, dest: Path) -> None:
        """Copy ``path`` of the box to the host file ``dest``. Raises BoxError (``dest`` removed)."""
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            reply, _ = await self._require().request({"op": "get", "path": self._abs(path)}, (fd,))
        finally:
            os.close(fd)
        if "error" in reply:
            dest.unlink(missing_ok=True)
            raise BoxError(reply["error"])

    async def dial(self, port: int) -> socket.socket:
        """A TCP connection to ``127.0.0.1:port`` inside the box (for a service it declared)."""
        reply, fds = await self._require().request({"op": "sockets", "n": 1, "family": 4})
        if not fds:
            raise BoxError(reply.get("error", "no socket"))
        s = socket.socket(fileno=fds[0])
        s.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(s, ("127.0.0.1", port))
        except BaseException:
            s.close()
            raise
        return s

    async def _listen(self, ip: str, port: int) -> socket.socket:
        reply, fds = await self._require().request({"op": "listen", "ip": ip, "port": port})
        if not fds:
            raise OSError(reply.get("error", "no listener"))
        sock = socket.socket(fileno=fds[0])
        sock.setblocking(False)
        return sock

    def _abs(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.workdir.rstrip('/')}/{path}"

    def _require(self) -> Joiner:
        if not self.alive or self.joiner is None:
            raise BoxError(f"sandbox {self.name} is not running")
        return self.joiner

    def processes(self) -> list[psutil.Process]:
        """Every process of the box (keeper tree and what the joiner started), for accounting."""
        out: list[psutil.Process] = []
        pids = [
            self.keeper.pid if self.keeper is not None and self.keeper.poll() is None else None,
            self.joiner.pid if self.joiner is not None and self.joiner.ctl.fileno() != -1 else None,
        ]
        for pid in pids:
            if pid is None:
                continue
            try:
                p = psutil.Process(pid)
                out += [p, *p.children(recursive=True)]
            except psutil.Error:
                pass
        return out

    def over_limit(self) -> str | None:
        """Why the box is over a limit the kernel does not enforce (memory, pids), else None."""
        procs = self.processes()
        if self.limits.memory_mb and "memory" not in self.enforced:
            rss = 0
            for p in procs:
                try:
                    rss += p.memory_info().rss
                except psutil.Error:
                    pass
            if rss > self.limits.memory_mb << 20:
                return f"memory over {self.limits.memory_mb} MiB"
        if self.limits.pids and "pids" not in self.enforced and len(procs) > self.limits.pids:
            return f"more than {self.limits.pids} processes"
        return None

    # ---------------------------------------------------------------- end
    async def close(self) -> None:
        """Kill every process of the box, remove its cgroups and its directory. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for s in self._servers:
            s.close()
        if self._dns is not None:
            self._dns.close()
        if self.keeper is not None and self.keeper.poll() is None:
            _kill_tree(self.keeper.pid)
        if self._keeper_w is not None:
            os.close(self._keeper_w)
            self._keeper_w = None
        if self.joiner is not None:
            self.joiner.close()
        if self.keeper is not None:
            await asyncio.get_running_loop().run_in_executor(None, _reap, self.keeper)
        if self._cg is not None:
            self._cg.remove()
        for d in self._cpu_dirs:
            try:
                d.rmdir()
            except OSError:
                pass
        await asyncio.get_running_loop().run_in_executor(None, _remove_tree, self.dirs.base)


def box_support(report) -> tuple[str, str] | str:
    """What boxes get on this host, from the isolation probe (``probe.py``): ``(bwrap, proc_mode)``
    (``mount``: a private ``/proc``, level ``full``; ``bind``: the host's ``/proc`` read-only,
    level ``partial``), or the reason there are none (no user namespaces, no bubblewrap)."""
    bwrap, proc = report.details.get("bwrap"), report.details.get("proc")
    if report.level.value == "none":
        return "this host cannot make unprivileged namespaces: " + "; ".join(report.reasons)
    if not bwrap or not proc:
        return "bubblewrap cannot run here: " + "; ".join(report.reasons)
    return bwrap, proc
