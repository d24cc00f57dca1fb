"""Bytecode for read-only venvs: one cache per venv that only the daemon writes, learned from what
its processes import (docs/architecture.md §5).

Builds compile nothing: ``uv pip install --compile-bytecode`` compiles every file of the closure
(about 17,000 for Gym's SDK) although a server imports about 2,000 of them. Instead:

* The venv's own ``__pycache__`` dirs are its **shared cache**. Only the daemon writes them, by
  compiling the venv's own sources with the venv's interpreter in isolated mode (``-I -S``: no
  ``site``, so no ``.pth`` file of the venv runs). Processes read them inside the read-only venv
  bind and run with ``PYTHONDONTWRITEBYTECODE=1`` (at isolation ``none`` the venv is writable), so
  no server can plant bytecode that another server imports. The interpreter's standard library
  keeps its own bytecode.
* ``<venv>/.gym-runtime/pycache.json`` lists the *users* (a server type/implementation and its
  directory, or ``ray_head``) whose imports are in the shared cache.
* A user not listed yet starts with a **learning dir** of its own
  (``<venv>/.gym-runtime/learn/<n>``, writable for that process alone) as its
  ``PYTHONPYCACHEPREFIX``, so its imports leave ``.pyc`` files there. A *reporting* user (the
  preloaded parent, ``sandbox/_zygote.py``) instead reads the shared cache and the standard
  library's bytecode, writes nothing, and lists the source files of the modules it imported
  without fresh bytecode to read (it compiled them) in the dir's ``imported.txt`` (:data:`REPORT`).
  A learning server forked from such a parent reports too: it is offered its own learning dir's
  report file (:data:`REPORT_VAR`) and takes it only when forked (a process started on its own
  learns under its prefix). :func:`harvest` then reads only *names*: each names a
  source file; the regular ``.py`` files inside the venv (never inside ``.gym-runtime``) are
  compiled by the daemon into the shared cache, the user is recorded and the dir is removed. A
  process's own bytecode is never copied. This runs in the background at a lower CPU priority
  while the processes start (every second, what they imported since), so little is left once they
  are ready, and a user is recorded once its process is ready (its start-up imports are done).

A learning dir whose daemon died before harvesting (its ``flock`` is free) is harvested by the next
start of that venv (:func:`harvest_stale`). What the shared cache holds outlives the venv in the
bytecode store (:mod:`gym_runtime.venvs.pyc_store`): a rebuilt venv of the same plan digest gets
it back before its processes start, and its users then learn nothing. Compiling is bounded by the cores, runs in its own
process group and is killed on cancel; what was compiled stays valid (each file is written
atomically and checked against its source's mtime and size on import).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_runtime.files import read_regular, try_lock, write_json

LEARN = Path(".gym-runtime") / "learn"
REPORT = "imported.txt"  # a reporting user's list of the sources it imported, each path ended by a NUL
REPORT_VAR = "GYM_RUNTIME_PYCACHE_REPORT"  # where a forked learning server may list what it compiled
MAX_REPORT = 16 << 20  # bytes of a report read (a parent of the 0.7 SDK lists ~3,600 paths, ~400 KiB)
RECORD = Path(".gym-runtime") / "pycache.json"
RAY_HEAD = "ray_head"
PRELOADED_PARENT = "preloaded parent"  # the user of a venv's preloaded parent (sandbox/zygote.py)
_RECORDING = threading.Lock()  # held while a venv's RECORD is read and written again (record_users)
NICE = 10  # compilers' CPU priority (a higher nice value yields to the servers)
_PYC = re.compile(r"^(?P<stem>[^.]+)\.[a-z]+-\d+(\.opt-\d)?\.pyc$")
# compileall skips files whose cached bytecode is already up to date; prints how many it compiled.
# The paths come NUL-separated: a file name (a state root's, a package's) may hold a newline.
_COMPILE = (
    "import compileall, os, sys\n"
    "paths = [os.fsdecode(p) for p in sys.stdin.buffer.read().split(b'\\0') if p]\n"
    "print(sum(bool(compileall.compile_file(p, quiet=2)) for p in paths))\n"
)


@dataclass
class Pycache:
    """The bytecode one process uses. ``prefix``: its learning dir (writable for this process
    alone), or None when it reads the venv's shared cache and learns nothing; ``key``: the user it
    learns for; ``venv``: the venv it belongs to; ``report``: it reads the shared cache and lists
    what it imported in ``prefix / REPORT`` instead of writing bytecode there."""

    venv: Path
    key: str
    prefix: Path | None
    _lock_fd: int | None = field(default=None, repr=False)
    report: bool = False

    @property
    def learning(self) -> bool:
        return self.prefix is not None

    @property
    def env(self) -> dict[str, str]:
        """The variables to add to the process's environment. A learning process (not a reporting
        one) also gets :data:`REPORT_VAR`, its :data:`REPORT` file: a server forked from a preloaded
        parent that reads the shared cache reads it too and lists there what it compiled
        (``sandbox/_zygote.py``)."""
        if self.prefix is None or self.report:
            return {"PYTHONDONTWRITEBYTECODE": "1"}
        return {"PYTHONPYCACHEPREFIX": str(self.prefix), REPORT_VAR: str(self.prefix / REPORT)}

    @property
    def report_file(self) -> Path | None:
        """Where a reporting user lists what it imported (None for any other)."""
        return self.prefix / REPORT if self.prefix is not None and self.report else None

    @property
    def writable(self) -> list[Path]:
        """Paths the sandbox must bind writable for this process (the learning dir, if any)."""
        return [self.prefix] if self.prefix is not None else []

    def release(self) -> None:
        """Drop the learning dir's lock (a later start may then harvest it)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def learned(venv: Path) -> set[str]:
    """The users whose imports the shared cache of ``venv`` holds."""
    try:
        data = json.loads((venv / RECORD).read_text())
    except (OSError, ValueError):
        return set()
    users = data.get("learned") if isinstance(data, dict) else None
    return {u for u in users if isinstance(u, str)} if isinstance(users, list) else set()


def record_users(venv: Path, keys: set[str]) -> None:
    """Add ``keys`` to the users whose imports the shared cache of ``venv`` holds (one writer at a
    time: the harvest's threads and the event loop both add users)."""
    with _RECORDING:
        (venv / RECORD).parent.mkdir(exist_ok=True)
        write_json(venv / RECORD, {"learned": sorted(learned(venv) | keys)}, indent=1)


def for_user(venv: Path, key: str, report: bool = False) -> Pycache:
    """The cache a process of ``venv`` acting as ``key`` starts with: the shared cache when ``key``
    was learned, else a fresh learning dir held (locked) by this daemon until :func:`harvest`
    (``report``: the process lists what it imported there, :class:`Pycache`)."""
    venv = Path(venv)
    if key in learned(venv):
        return Pycache(venv, key, None)
    try:
        base = venv / LEARN
        base.mkdir(parents=True, exist_ok=True)
        d = Path(tempfile.mkdtemp(dir=base))
        (d / "key").write_text(key)
        fd = try_lock(d / "lock", 0o600)
    except OSError:  # a venv root the daemon cannot write (a read-only image): run without learning
        return Pycache(venv, key, None)
    return Pycache(venv, key, d, fd, report)


def _reported(cache: Pycache) -> list[str]:
    """The absolute paths a process listed in its learning dir's :data:`REPORT` (none if absent, or
    if it is no regular file: the process may have put a link or a FIFO there)."""
    if cache.prefix is None:
        return []
    try:
        data = read_regular(cache.prefix / REPORT, MAX_REPORT)
    except (OSError, ValueError):
        return []
    return [p for p in map(os.fsdecode, data.split(b"\0")) if p.startswith("/") and p.endswith(".py")]


def sources(cache: Pycache) -> list[str]:
    """Source files the learning dir has bytecode for, or that its process reported importing,
    kept only when they are regular ``.py`` files inside the venv and outside its ``.gym-runtime``
    dir (names only: a process may have written anything there). Each is given by its real path:
    a name through a link in the learning dir, which its process can point elsewhere between this
    check and the compile, would let it choose what is compiled into the shared cache."""
    if (prefix := cache.prefix) is None:  # not learning: nothing to read
        return []
    root = os.path.realpath(cache.venv)
    private = os.path.realpath(cache.venv / ".gym-runtime")
    named: list[str] = _reported(cache)
    for dirpath, _dirs, files in os.walk(prefix):
        rel = os.path.relpath(dirpath, prefix)
        if rel == ".":
            continue
        named += [os.path.join("/", rel, m["stem"] + ".py") for m in map(_PYC.match, files) if m is not None]
    out: set[str] = set()
    for src in named:
        real = os.path.realpath(src)
        if real.startswith(root + os.sep) and not real.startswith(private + os.sep) and os.path.isfile(real):
            out.add(real)  # no link left on it: every directory on it is the venv's own, read-only to servers
    return sorted(out)


async def in_background(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a daemon thread of its own, awaited. Not ``asyncio.to_thread``: the loop's
    executor and the interpreter's exit join their threads, so a stop that cancels a harvest
    would wait for its walk, its ``rmtree`` of thousands of files or its store save to end (2 s
    of a 3.4 s stop measured on a loaded host). What a thread abandoned at exit leaves is safe: a
    learning dir half removed (its user was recorded first; the next start removes the rest),
    store objects and records are written to temporary names and renamed, and a compile is a
    separate process killed by :meth:`gym_runtime.venvs.env_bytecode.EnvironmentBytecode.close`."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if not fut.done():
            fut.set_exception(error) if error is not None else fut.set_result(result)

    def work() -> None:
        try:
            result, error = fn(*args), None
        except BaseException as e:  # handed to the awaiting task, which decides
            result, error = None, e
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name="gym-runtime-bytecode", daemon=True).start()
    return await fut


async def compile_into_shared(
    venv: Path, python: Path, files: list[str], jobs: int | None = None, nice: int = NICE
) -> int:
    """Compile ``files`` (sources inside ``venv``) into their ``__pycache__`` dirs with the venv's
    own interpreter, ``jobs`` processes at once (default: CPU count) at CPU priority ``nice``;
    returns how many compiled (up to date counts). Raises ``RuntimeError`` when a compiler process
    fails; cancelling kills them."""
    if not files:
        return 0
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(files)))
    argv = [str(python), "-I", "-S", "-c", _COMPILE]
    chunks = [files[i::jobs] for i in range(jobs)]
    procs = [
        await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
        for _ in chunks
    ]
    try:
        for p in procs:  # background work (unless the processes wait for it): theirs come first
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, p.pid, nice)
        outs = await asyncio.gather(
            *(p.communicate(b"\0".join(map(os.fsencode, c))) for p, c in zip(procs, chunks, strict=True))
        )
    finally:
        for p in procs:
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                await p.wait()
    if any(p.returncode != 0 for p in procs):
        raise RuntimeError(f"compiling bytecode for {venv} failed (exit {[p.returncode for p in procs]})")
    return sum(int(out.strip() or 0) for out, _ in outs)


async def harvest(python: Path, caches: list[Pycache]) -> int:
    """Compile what the learning ``caches`` (all of one venv, interpreter ``python``) imported into
    the shared cache, record their users, remove the learning dirs; returns files compiled."""
    caches = [c for c in caches if c.learning]
    if not caches:
        return 0
    venv = caches[0].venv
    files = sorted({f for c in caches for f in await in_background(sources, c)})
    n = await compile_into_shared(venv, python, files)
    await in_background(finish, caches)  # removing thousands of files must not block the loop
    return n


def finish(caches: list[Pycache]) -> None:
    """Record the users of harvested learning ``caches`` (all of one venv) and remove their dirs."""
    if not caches:
        return
    record_users(caches[0].venv, {c.key for c in caches})
    for c in caches:
        if c.prefix is not None:
            shutil.rmtree(c.prefix, ignore_errors=True)
        c.release()
        c.prefix = None


def stale(venv: Path) -> list[Pycache]:
    """Learning dirs of ``venv`` no running daemon holds (an earlier run stopped before harvesting
    them), each now locked by the caller."""
    out = []
    base = Path(venv) / LEARN
    for d in sorted(base.iterdir()) if base.is_dir() else []:
        if not d.is_dir():
            continue
        fd = try_lock(d / "lock", 0o600)
        if fd is None:
            continue
        try:
            key = (d / "key").read_text()
        except OSError:
            key = ""
        if not key:  # never started learning: nothing to harvest
            os.close(fd)
            shutil.rmtree(d, ignore_errors=True)
            continue
        out.append(Pycache(Path(venv), key, d, fd))
    return out


async def harvest_stale(venv: Path, python: Path) -> int:
    """:func:`harvest` the learning dirs an earlier run left in ``venv``; returns files compiled."""
    return await harvest(python, await in_background(stale, venv))
