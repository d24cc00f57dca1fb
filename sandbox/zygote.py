"""Preloaded parents: the servers of one venv forked from one process that imported their shared
modules once (docs/architecture.md, "Preloaded parents").

Most of a warm start is each server importing the same SDK (FastAPI, pydantic, openai, Ray, the
Gym SDK and what it pulls in: pandas, scipy, pyarrow). The servers of one environment package are
one trust domain (they share a network namespace already), so :func:`start_parents` starts, per
venv with two or more servers that ask for it (``ProcessSpec.preload``), one parent inside the
environment's sandbox (``_zygote.py``: bubblewrap with the union of those servers' paths and
``CAP_SYS_ADMIN`` in its own user namespace only), which imports the modules and forks each
server (:meth:`Zygote.fork`). Each server still gets its own mount namespace (its own ``/tmp``,
its ``resolv.conf``, the other servers' writable directories unmounted), its own cgroups and
limits, session and log, no capability, and its secrets only after the fork, from the daemon,
never through the parent.

A server is started the usual way (its own bubblewrap) when the parent could not be made or
imported something that started a Python thread (a fork carries no thread), when the server
needs a copy-on-write tree or runs something else than ``python script`` / ``python -m module``,
or when one of its paths is not in the parent's view (a server added after the start); the
progress lines say which and why.
"""

from __future__ import annotations

import array
import asyncio
import itertools
import json
import logging
import os
import socket
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_runtime.errors import StartError

from .limits import join_cgroups
from .probe import interpreter_roots

log = logging.getLogger("sandbox")
PARENT = Path(__file__).with_name("_zygote.py")  # run by the venv's interpreter (its directory bound read-only)
PRELOAD_TIMEOUT_S = 120.0
HELLO_TIMEOUT_S = 20.0
MAX_MESSAGE = 1 << 16
_UCRED = struct.Struct("iII")


@dataclass(frozen=True)
class Preload:
    """What a server shares with the other servers of its venv: ``modules`` to import once
    (dotted names; those the venv lacks are skipped), and the parent's own bytecode cache
    (``env``, ``writable``: :class:`gym_runtime.venvs.bytecode.Pycache`'s; ``report``: the file,
    in ``writable``, where it lists the source files of what it imported, or None). Its
    environment is what all its servers share, but for ``withheld``."""

    modules: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    writable: tuple[Path, ...] = ()
    withheld: tuple[str, ...] = ()  # variables of its servers the parent does not get (e.g. the run's mark)
    report: str | None = None


class ForkedChild:
    """The part of :class:`subprocess.Popen` that :class:`sandbox.process.SandboxedProcess` reads
    (``pid``: the host pid; ``returncode``; ``poll()``) for a server forked by a :class:`Zygote`,
    whose exit status the parent reports. ``on_exit`` is called once it is known."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.on_exit: Callable[[], Any] = lambda: None

    def poll(self) -> int | None:
        return self.returncode

    def ended(self, status: int) -> None:
        if self.returncode is None:
            self.returncode = status
            self.on_exit()


def why_alone(argv: Sequence[str], copy_on_write: bool) -> str | None:
    """Why a server run by ``argv`` (``copy_on_write``: its tree is a copy-on-write view) cannot be
    forked from a preloaded parent, or None."""
    argv = list(argv)
    if len(argv) < 2 or (argv[1].startswith("-") and (argv[1] != "-m" or len(argv) < 3)):
        return "it is not run as `python script` or `python -m module`"
    if copy_on_write:
        return "its tree is a copy-on-write view"
    return None


def _shape(spec: Any) -> tuple[Sequence[str], bool]:
    """What :func:`why_alone` and :func:`parent_groups` read of a ``ProcessSpec``: its argv, and
    whether its tree is a copy-on-write view."""
    return spec.argv, bool(spec.cow_paths)


def parent_groups(servers: Mapping[str, tuple[Sequence[str], bool]]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Which servers one preloaded parent forks. ``servers``: name -> (argv, copy_on_write) of
    each server that asks for a parent. Returns interpreter (``argv[0]``) -> the names of the
    servers its parent forks (two or more, in ``servers``' order), and name -> why a server
    starts on its own (:func:`why_alone`); the one server of an interpreter is in neither."""
    groups: dict[str, list[str]] = {}
    alone: dict[str, str] = {}
    for name, (argv, cow) in servers.items():
        why = why_alone(argv, cow)
        if why:
            alone[name] = why
        else:
            groups.setdefault(str(argv[0]), []).append(name)
    return {py: names for py, names in groups.items() if len(names) >= 2}, alone


def _resolved(paths: Sequence[Any]) -> list[Path]:
    return [Path(p).resolve() for p in paths if Path(p).exists()]


class Zygote:
    """One preloaded parent (module doc): ``python`` (the venv's interpreter), ``ctl`` (the
    daemon's end of its control socket), ``ro`` and ``writable`` (the read-only and writable
    paths of its view, resolved), ``broken`` (why it forks nothing, or None), ``ready`` (its
    imports, a task). Made by :func:`start_parents`."""

    def __init__(self, python: str, ctl: socket.socket, ro: list[Path], writable: list[Path]) -> None:
        self.python, self.ctl = python, ctl
        self.ro, self.writable = ro, writable
        self.children: dict[int, ForkedChild] = {}
        self.modules: list[str] = []
        self.closed = False
        self.broken: str | None = None  # why it forks nothing (more): its servers start on their own
        self.ready: asyncio.Task | None = None  # its imports (start_parents)
        self.process: Any = None  # its sandboxed process handle (bubblewrap, the parent below it)
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ preload
    async def preload(self, modules: Sequence[str], report: str | None = None) -> dict[str, Any]:
        """Import ``modules`` in the parent (which then lists the source files of what it imported
        in the file ``report``, if given); its answer (``_zygote.py``). Raises StartError when it
        gives none within :data:`PRELOAD_TIMEOUT_S`."""
        loop = asyncio.get_running_loop()
        self.ctl.send(json.dumps({"op": "preload", "modules": list(modules), "report": report}).encode())
        try:
            raw = await asyncio.wait_for(loop.sock_recv(self.ctl, MAX_MESSAGE), PRELOAD_TIMEOUT_S)
        except TimeoutError:
            raise StartError(
                f"the preloaded parent of {self.python} did not import its modules within {PRELOAD_TIMEOUT_S:g}s"
            ) from None
        if not raw:
            raise StartError(f"the preloaded parent of {self.python} ended while importing its modules")
        answer = json.loads(raw)
        self.modules = list(answer.get("ok", []))
        self._loop = loop
        loop.add_reader(self.ctl.fileno(), self._on_message)
        return answer

    def _on_message(self) -> None:
        try:
            raw = self.ctl.recv(MAX_MESSAGE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            raw = b""
        if not raw:
            self._lost()
            return
        msg = json.loads(raw)
        child = self.children.pop(msg["exit"], None) if "exit" in msg else None
        if child is not None:
            child.ended(int(msg["status"]))

    def _stop_reading(self) -> None:
        self.closed = True
        if self._loop is not None:
            self._loop.remove_reader(self.ctl.fileno())
            self._loop = None

    def _lost(self) -> None:
        """The parent ended: its pid namespace, and every server it forked, ended with it."""
        self._stop_reading()
        for child in list(self.children.values()):
            child.ended(-9)
        self.children.clear()

    # ------------------------------------------------------------------ fork
    def covers(self, spec: Any) -> str | None:
        """Why ``spec`` cannot be forked from this parent now, or None."""
        if self.closed:
            return "its preloaded parent ended"
        if self.ready is not None and not self.ready.done():
            return "its preloaded parent is still importing"
        if self.broken:
            return f"its preloaded parent forks nothing: {self.broken}"
        why = why_alone(*_shape(spec))
        if why:
            return why
        missing = [
            p
            for p in _resolved([*spec.read_only_paths, spec.cwd])
            if not any(p == r or r in p.parents for r in self.ro + self.writable)
        ]
        missing += [p for p in _resolved(spec.writable_paths) if p not in self.writable]
        return f"{missing[0]} is not in its preloaded parent's view" if missing else None

    def fork(self, spec: Any, env: Mapping[str, str], resolv: Path | None, procs_files: Sequence[str]) -> ForkedChild:
        """Fork server ``spec`` with environment ``env`` (its private variables follow the fork),
        move it into the cgroups of ``procs_files`` before it runs, and return its handle. Blocks
        until the child has set itself up (milliseconds). Raises StartError naming the step that
        failed."""
        own = set(_resolved(spec.writable_paths))
        hide = [str(p) for p in self.writable if p not in own and not any(p in o.parents for o in own)]
        tmp = Path("/tmp")
        seen = _resolved([*spec.read_only_paths, spec.cwd, *interpreter_roots(str(spec.argv[0]))])
        keep = sorted({str(p) for p in [*seen, *own] if tmp in p.parents}, key=lambda k: k.count("/"))
        rid = next(self._ids)
        request = {
            "op": "fork",
            "id": rid,
            "name": spec.name,
            "argv": list(spec.argv),
            "cwd": str(spec.cwd),
            "env": dict(env),
            "nofile": spec.limits.nofile,
            "hide": hide,
            "keep": keep,
            "resolv": str(resolv) if resolv else None,
        }
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with ours:
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            out = spec.stdout_fd if spec.stdout_fd is not None else 1
            err = spec.stderr_fd if spec.stderr_fd is not None else 2
            try:
                self.ctl.sendmsg(
                    [json.dumps(request).encode()],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [out, err, theirs.fileno()]))],
                )
            except OSError as e:
                raise StartError(f"server {spec.name!r}: its preloaded parent did not take the fork: {e}") from None
            finally:
                theirs.close()
            pid = self._hello(ours, spec.name)
            join_cgroups(procs_files, pid)  # before it runs any code of its own: the limits hold from its first line
            child = ForkedChild(pid)
            self.children[rid] = child
            ours.sendall(json.dumps(dict(spec.private_env)).encode())
            ours.shutdown(socket.SHUT_WR)
        return child

    def _hello(self, sock: socket.socket, name: str) -> int:
        """The host pid of the child that said hello on ``sock`` (its credentials, translated into
        the daemon's pid namespace by the kernel)."""
        sock.settimeout(HELLO_TIMEOUT_S)
        try:
            msg, anc, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(_UCRED.size))
        except OSError as e:
            raise StartError(f"server {name!r}: no answer from its fork within {HELLO_TIMEOUT_S:g}s: {e}") from None
        pid = next(
            (
                _UCRED.unpack(data[: _UCRED.size])[0]
                for level, kind, data in anc
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS
            ),
            None,
        )
        if msg != b"hello" or pid is None:
            said = msg.decode(errors="replace") or "it ended before setting itself up"
            raise StartError(
                f"server {name!r} could not be forked from its preloaded parent: {said}",
                hint="GYM_RUNTIME_PRELOAD=off starts every server on its own",
            )
        return pid

    def pending(self, spec: Any) -> asyncio.Future | None:
        """Its imports while they run and ``spec`` is one it would fork, else None."""
        if self.ready is None or self.ready.done() or self.closed or why_alone(*_shape(spec)):
            return None
        return self.ready

    def close(self) -> None:
        if self.ready is not None and not self.ready.done():
            self.ready.cancel()
        self._stop_reading()
        self.ctl.close()


def parent_spec(
    name: str, python: str, specs: Sequence[Any], preload: Preload, work_dir: Path, state: Path, ctl_fd: int
) -> Any:
    """The ``ProcessSpec`` of the parent of ``specs`` (all run by ``python``): every path they read
    and write, the sandbox's state (their ``resolv.conf`` files), its own bytecode cache."""
    from .launch import ProcessSpec

    ro: list[Any] = [state, PARENT.parent]
    writable: list[Any] = list(preload.writable)
    for s in specs:
        ro += [*s.read_only_paths, s.cwd]
        writable += list(s.writable_paths)
    shared = {
        k: v for k, v in specs[0].env.items() if k not in preload.withheld and all(s.env.get(k) == v for s in specs[1:])
    }
    env = {**shared, **preload.env, "HOME": str(work_dir)}
    if "PYTHONPYCACHEPREFIX" in preload.env:  # learning: it writes what it compiles into its own dir
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:  # it reads the venv's shared cache and writes nothing
        env.pop("PYTHONPYCACHEPREFIX", None)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return ProcessSpec(
        name,
        [python, str(PARENT), str(ctl_fd)],
        work_dir,
        env,
        read_only_paths=list(dict.fromkeys(ro)),
        writable_paths=list(dict.fromkeys([work_dir, *writable])),
        keep_caps=("CAP_SYS_ADMIN",),
        pass_fds=(ctl_fd,),
    )


def start_parents(
    specs: Sequence[Any], spawn: Callable[[Any], Any], work_dir: Path, state: Path, say: Callable[[str], None]
) -> dict[str, Zygote]:
    """One preloaded parent per venv of two or more eligible ``specs`` with a ``preload``, started
    with ``spawn(spec)`` (the sandbox's own launch); each imports its modules in the background
    (:attr:`Zygote.ready`, beside the rest of the start, e.g. the Ray head's) and ``say`` gets its
    progress line: what it imported and in how long, or why its servers start on their own. Call
    on the event-loop thread. Returns the parents by interpreter."""
    asking = {s.name: s for s in specs if getattr(s, "preload", None) is not None}
    groups, alone = parent_groups({n: _shape(s) for n, s in asking.items()})
    for name, why in alone.items():
        say(f"preload: server {name} starts on its own: {why}")
    parents: dict[str, Zygote] = {}
    for python, names in groups.items():
        group = [asking[n] for n in names]
        venv = Path(python).parent.parent.name
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setblocking(False)
        wd = work_dir / f"preload-{venv}"
        wd.mkdir(parents=True, exist_ok=True)
        spec = parent_spec(f"preload:{venv}", python, group, group[0].preload, wd, state, theirs.fileno())
        try:
            spec.stdout_fd = spec.stderr_fd = os.open(wd / "parent.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                handle = spawn(spec)
            finally:
                os.close(spec.stdout_fd)
                theirs.close()
        except (StartError, OSError) as e:
            ours.close()
            say(
                f"preload: venv {venv}: no preloaded parent ({getattr(e, 'message', e)}); its servers start on "
                "their own"
            )
            continue
        z = Zygote(python, ours, _resolved(spec.read_only_paths), _resolved(spec.writable_paths))
        z.process = handle
        z.ready = asyncio.get_running_loop().create_task(_preloaded(z, group[0].preload, venv, len(group), say))
        parents[python] = z
    return parents


async def _preloaded(z: Zygote, preload: Preload, venv: str, servers: int, say: Callable[[str], None]) -> None:
    """The parent's imports; says what they gave, or marks it broken (its servers start on their own)."""
    try:
        answer = await z.preload(preload.modules, preload.report)
    except (StartError, OSError, ValueError) as e:  # the parent failed: none of its servers waits on it
        z.broken = getattr(e, "message", None) or f"{type(e).__name__}: {e}"
        say(f"preload: venv {venv}: {z.broken}; its servers start on their own")
        return
    if answer.get("threads"):
        z.broken = (
            f"importing its modules started threads ({', '.join(answer['threads'])}), which a fork does not carry"
        )
    elif answer.get("views"):
        z.broken = f"a server forked there could not have a view of its own ({answer['views']})"
    if z.broken:
        say(f"preload: venv {venv}: {z.broken}; its servers start on their own")
        return
    failed = "; ".join(f"{m}: {e}" for m, e in answer.get("failed", {}).items())
    say(
        f"preload: venv {venv}: {servers} servers forked from one parent that imported {len(z.modules)} modules in "
        f"{answer.get('seconds', 0):.2f}s"
        + (f", {answer['immortal']:,} objects made immortal" if answer.get("immortal") else "")
        + (f", {answer['unmapped'] / 2**20:.0f} MiB of library pages unmapped" if answer.get("unmapped") else "")
        + (f" (not imported: {failed})" if failed else "")
    )
