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
  library's bytecode, writes nothing, and lists the source files of the modules it imported in
  the dir's ``imported.txt`` (:data:`REPORT`). :func:`harvest` then reads only *names*: each names a
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
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_runtime.files import try_lock, write_json
from gym_runtime.venvs.pyc_store import Interpreter, PycStore, interpreter
from gym_runtime.venvs.seed import seed_sources
from gym_runtime.venvs.store import read_marker

LEARN = Path(".gym-runtime") / "learn"
REPORT = "imported.txt"  # a reporting user's list of the sources it imported, one path per line
MAX_REPORT = 16 << 20  # bytes of a report read (a parent of the 0.7 SDK lists ~3,600 paths, ~400 KiB)
RECORD = Path(".gym-runtime") / "pycache.json"
RAY_HEAD = "ray_head"
PRELOADED_PARENT = "preloaded parent"  # the user of a venv's preloaded parent (sandbox/zygote.py)
NICE = 10  # compilers' CPU priority (a higher nice value yields to the servers)
_PYC = re.compile(r"^(?P<stem>[^.]+)\.[a-z]+-\d+(\.opt-\d)?\.pyc$")
# compileall skips files whose cached bytecode is already up to date; prints how many it compiled
_COMPILE = ("import compileall, sys\n"
            "ok = sum(bool(compileall.compile_file(p, quiet=2)) for p in sys.stdin.read().splitlines() if p)\n"
            "print(ok)\n")


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
        """The variables to add to the process's environment."""
        if self.prefix is None or self.report:
            return {"PYTHONDONTWRITEBYTECODE": "1"}
        return {"PYTHONPYCACHEPREFIX": str(self.prefix)}

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


def _record(venv: Path, keys: set[str]) -> None:
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
    """The absolute paths a process listed in its learning dir's :data:`REPORT` (none if absent)."""
    try:
        with open(cache.prefix / REPORT, "rb") as f:
            data = f.read(MAX_REPORT)
    except OSError:
        return []
    return [p for p in data.decode("utf-8", "replace").splitlines() if p.startswith("/") and p.endswith(".py")]


def sources(cache: Pycache) -> list[str]:
    """Source files the learning dir has bytecode for, or that its process reported importing,
    kept only when they are regular ``.py`` files inside the venv and outside its ``.gym-runtime``
    dir (names only: a process may have written anything there)."""
    root = os.path.realpath(cache.venv)
    private = os.path.realpath(cache.venv / ".gym-runtime")
    named: list[str] = _reported(cache)
    for dirpath, _dirs, files in os.walk(cache.prefix):
        rel = os.path.relpath(dirpath, cache.prefix)
        if rel == ".":
            continue
        named += [os.path.join("/", rel, m["stem"] + ".py") for m in map(_PYC.match, files) if m is not None]
    out: set[str] = set()
    for src in named:
        real = os.path.realpath(src)
        if real.startswith(root + os.sep) and not real.startswith(private + os.sep) and os.path.isfile(real):
            out.add(src)  # the path the process imported it by: the cache entry it looks up
    return sorted(out)


async def _background(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a daemon thread of its own, awaited. Not ``asyncio.to_thread``: the loop's
    executor and the interpreter's exit join their threads, so a stop that cancels a harvest
    would wait for its walk, its ``rmtree`` of thousands of files or its store save to end (2 s
    of a 3.4 s stop measured on a loaded host). What a thread abandoned at exit leaves is safe: a
    learning dir half removed (its user was recorded first; the next start removes the rest),
    store objects and records are written to temporary names and renamed, and a compile is a
    separate process killed by :meth:`EnvironmentBytecode.close`."""
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


async def compile_into_shared(venv: Path, python: Path, files: list[str], jobs: int | None = None,
                              nice: int = NICE) -> int:
    """Compile ``files`` (sources inside ``venv``) into their ``__pycache__`` dirs with the venv's
    own interpreter, ``jobs`` processes at once (default: CPU count) at CPU priority ``nice``;
    returns how many compiled (up to date counts). Raises ``RuntimeError`` when a compiler process
    fails; cancelling kills them."""
    if not files:
        return 0
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(files)))
    argv = [str(python), "-I", "-S", "-c", _COMPILE]
    chunks = [files[i::jobs] for i in range(jobs)]
    procs = [await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                  stderr=asyncio.subprocess.DEVNULL, start_new_session=True,
                                                  env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
             for _ in chunks]
    try:
        for p in procs:  # background work (unless the processes wait for it): theirs come first
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, p.pid, nice)
        outs = await asyncio.gather(*(p.communicate("\n".join(c).encode()) for p, c in zip(procs, chunks)))
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
    files = sorted({f for c in caches for f in await _background(sources, c)})
    n = await compile_into_shared(venv, python, files)
    await _background(finish, caches)  # removing thousands of files must not block the loop
    return n


def finish(caches: list[Pycache]) -> None:
    """Record the users of harvested learning ``caches`` (all of one venv) and remove their dirs."""
    if not caches:
        return
    _record(caches[0].venv, {c.key for c in caches})
    for c in caches:
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
    return await harvest(python, await _background(stale, venv))


class EnvironmentBytecode:
    """The bytecode caches of one environment's processes: ``await prepare(pythons)`` before any
    starts (harvests what earlier runs left, places what ``store`` holds for each venv),
    ``user(python, key, name)`` per process, ``learn(ready)`` when they are spawned (harvests in
    the background while they start; a user is recorded once ``ready(name)`` says its process is
    done with its start-up imports; once all are ready, the venvs' caches are saved to
    ``store``), ``await settled(timeout_s)`` to wait for that work, ``await close()`` on stop."""

    def __init__(self, progress=None, store: PycStore | None = None) -> None:
        self.caches: list[tuple[Path, str, Pycache]] = []
        self._ready_as: dict[str, str] = {}  # a user whose process is no member -> the member it is ready with
        self.store = store
        self._say = progress or (lambda msg: None)
        self._task: asyncio.Task | None = None
        self._venvs: dict[Path, tuple[Path, str]] = {}  # venv -> (python, plan digest)
        self._interp: dict[Path, Interpreter] = {}
        self._stop = threading.Event()

    async def prepare(self, pythons: list[Path], seed: Sequence[str] = ()) -> None:
        """Harvest learning dirs earlier runs left in the venvs of ``pythons`` (``<venv>/bin/python``),
        then place the store's bytecode into each venv whose store record has users it lacks; a venv
        that still has no user learned gets ``seed`` (the release's start-up sources, relative to
        ``site-packages``: :mod:`gym_runtime.venvs.seed`) compiled before its processes start."""
        for py in dict.fromkeys(Path(p) for p in pythons):
            venv = py.parent.parent
            try:
                n = await harvest_stale(venv, py)
            except (RuntimeError, OSError) as e:  # speed only: the processes then learn again
                self._say(f"bytecode: {e}")
                continue
            if n:
                self._say(f"bytecode: compiled what an earlier run's processes imported into venv {venv.name} "
                          f"({n} files; that run stopped before compiling them); later starts load it instead of "
                          "compiling")
            digest = (read_marker(venv) or {}).get("digest")
            if self.store is not None and isinstance(digest, str):
                self._venvs[venv] = (py, digest)
                await self._place(venv, py, digest)
            if seed and not learned(venv):
                await self._seed(venv, py, seed)

    async def _interpreter(self, py: Path) -> Interpreter:
        if py not in self._interp:
            self._interp[py] = await _background(interpreter, py)
        return self._interp[py]

    async def _place(self, venv: Path, py: Path, digest: str) -> None:
        if not (self.store.users(digest) - learned(venv)):
            return
        try:
            got = await _background(self.store.place, venv, digest, await self._interpreter(py))
            if got.users:
                _record(venv, got.users)
        except (OSError, subprocess.SubprocessError, IndexError, ValueError) as e:  # speed only
            self._say(f"bytecode: the store was not used for {venv.name}: {e}")
            return
        left = f"; {len(got.rejected)} changed or unusable, so its processes learn again" if got.rejected else ""
        self._say(f"bytecode: {got.placed}/{got.total} files placed from the store into {venv.name}{left}")

    async def _seed(self, venv: Path, py: Path, seed: Sequence[str]) -> None:
        """Compile the ``seed`` sources ``venv`` has, on every core at full priority (its processes
        wait), and record the Ray head as learned (the seed holds what it imports)."""
        started = time.monotonic()
        files = await _background(seed_sources, venv, seed)
        try:
            n = await compile_into_shared(venv, py, files, nice=0)
        except (RuntimeError, OSError) as e:  # speed only: its processes learn as without a seed
            self._say(f"bytecode: the start-up seed was not compiled into {venv.name}: {e}")
            return
        _record(venv, {RAY_HEAD})
        self._say(f"bytecode: compiled {n} sources the release's servers and a Ray head import at start-up into "
                  f"venv {venv.name} in {time.monotonic() - started:.1f}s, before its processes start (nothing was "
                  "recorded for it)")

    def user(self, python: Path, key: str, name: str, ready_as: str | None = None, report: bool = False) -> Pycache:
        """The cache for process ``name`` run by ``python`` (``<venv>/bin/python``) as user ``key``;
        ``ready_as``: the process whose readiness ends its learning (a preloaded parent's: its
        first server's), else ``name``'s own; ``report``: it lists what it imports rather than
        write bytecode (:class:`Pycache`)."""
        cache = for_user(Path(python).parent.parent, key, report)
        self.caches.append((Path(python), name, cache))
        if ready_as is not None:
            self._ready_as[name] = ready_as
        return cache

    def _unsaved(self) -> list[Path]:
        """Venvs whose learned users the store lacks."""
        return [v for v, (_, digest) in self._venvs.items() if learned(v) - self.store.users(digest)]

    def learn(self, ready: Callable[[str], bool]) -> None:
        """Harvest the learning caches in the background while their processes start: every second
        what they imported since is compiled, and a cache is finished once ``ready(name)``; then
        save what the store lacks, once every process is ready. Called again once that work is
        done (a server moved to a rebuilt venv, :mod:`gym_runtime.supervise.venv_swap`), it
        harvests the caches made since. ``ready(name)`` is also true for a process that is gone."""
        work = any(c.learning for _, _, c in self.caches) or (self.store is not None and self._unsaved())
        if work and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._learn(ready))

    async def _learn(self, ready: Callable[[str], bool], every_s: float = 1.0) -> None:
        pending = [entry for entry in self.caches if entry[2].learning]
        seen_caches = len(self.caches)
        compiled: dict[Path, set[str]] = {}  # per venv: sources compiled by this task
        while pending:
            for entry in list(pending):
                py, name, cache = entry
                final = ready(self._ready_as.get(name, name))  # read first: what it imported is then all there
                seen = compiled.setdefault(cache.venv, set())
                new = [f for f in await _background(sources, cache) if f not in seen]
                try:
                    await compile_into_shared(cache.venv, py, new)
                    seen.update(new)
                    if final:
                        await _background(finish, [cache])  # never block the loop on rmtree
                except (RuntimeError, OSError) as e:  # a failed compile costs speed only, never correctness
                    self._say(f"bytecode: {e}")
                    final = True
                if final:
                    pending.remove(entry)
                    self._say(f"bytecode: compiled what {name} imports into venv {cache.venv.name} "
                              f"({len(seen)} files so far); later starts load it instead of compiling")
            pending += [entry for entry in self.caches[seen_caches:] if entry[2].learning]  # made meanwhile
            seen_caches = len(self.caches)
            await asyncio.sleep(every_s)
        if self.store is not None:
            # the store serves a later, rebuilt venv: its copy waits until every process is ready
            # rather than take the disk and a core from a start (2.4 s of the first warm start after
            # a cold one measured on two cores)
            while not all(ready(self._ready_as.get(name, name)) for _, name, _ in self.caches):
                await asyncio.sleep(every_s)
            await self._save()

    async def _save(self) -> None:
        for venv in self._unsaved():
            py, digest = self._venvs[venv]
            try:
                n = await _background(self.store.save, venv, digest, await self._interpreter(py),
                                            learned(venv), self._stop)
            except (OSError, subprocess.SubprocessError, IndexError, ValueError) as e:  # speed only
                self._say(f"bytecode: {venv.name}'s cache was not saved to the store: {e}")
                continue
            if n:
                self._say(f"bytecode: saved {n} compiled files of venv {venv.name} to the store "
                          "(a rebuilt venv starts with them)")

    async def settled(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for the background harvest and save that :meth:`learn`
        started (``gym-runtime prefetch`` stops only then); True when nothing is left to do: every
        learning user recorded in its venv and, with a store, saved to it."""
        if self._task is not None:
            done, _ = await asyncio.wait({self._task}, timeout=timeout_s)
            if not done:
                return False
        pending = any(c.learning for _, _, c in self.caches)
        return not pending and not (self.store is not None and self._unsaved())

    async def close(self) -> None:
        """Stop a running harvest or save (what it wrote stays valid) and release every learning dir."""
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for _, _, c in self.caches:
            c.release()
