"""The bytecode caches of one environment's processes (docs/architecture.md §5): the per-run side
of :mod:`gym_runtime.venvs.bytecode`. Before any process starts it harvests what earlier runs left
and places what the bytecode store holds; it hands each process its cache; for a venv with nothing
recorded it compiles the release's start-up seed (:mod:`gym_runtime.venvs.seed`) beside its
preloaded parent's imports; it harvests what the processes import in the background while they
start, and saves the result to the store."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gym_runtime.venvs.bytecode import (
    RAY_HEAD,
    Pycache,
    compile_into_shared,
    finish,
    for_user,
    harvest_stale,
    in_background,
    learned,
    record_users,
    sources,
)
from gym_runtime.venvs.pyc_store import Interpreter, PycStore, interpreter
from gym_runtime.venvs.seed import seed_sources
from gym_runtime.venvs.store import read_marker


class EnvironmentBytecode:
    """The bytecode caches of one environment's processes: ``await prepare(pythons)`` before any
    starts (harvests what earlier runs left, places what ``store`` holds for each venv),
    ``plan_seed(pythons, seed)`` before any cache is made and ``start_seed()`` once the preloaded
    parents are started (the start-up seed, compiled in the background),
    ``user(python, key, name)`` per process, ``learn(ready)`` when they are spawned (harvests in
    the background while they start; a user is recorded once ``ready(name)`` says its process is
    done with its start-up imports; once all are ready, the venvs' caches are saved to
    ``store``), ``await settled(timeout_s)`` to wait for that work, ``await close()`` on stop.
    ``finished(name)`` is called once process ``name``'s learning dir is harvested and removed:
    what starts it again (a crash's restart, an edit's) must no longer give it that dir
    (:meth:`gym_runtime.placement.local.LocalPlacement.respec_learned`)."""

    def __init__(self, progress=None, store: PycStore | None = None) -> None:
        self.caches: list[tuple[Path, str, Pycache]] = []
        self._ready_as: dict[str, str] = {}  # a user whose process is no member -> the member it is ready with
        self.store = store
        self._say = progress or (lambda msg: None)
        self._task: asyncio.Task | None = None
        self._venvs: dict[Path, tuple[Path, str]] = {}  # venv -> (python, plan digest)
        self._interp: dict[Path, Interpreter] = {}
        self._to_seed: dict[Path, tuple[str, ...]] = {}  # interpreter -> the start-up seed its venv gets (plan_seed)
        self._seeding: asyncio.Task | None = None  # the seeds' compile (start_seed)
        self._stop = threading.Event()
        self.finished: Callable[[str], None] = lambda name: None

    async def prepare(self, pythons: list[Path]) -> None:
        """Harvest learning dirs earlier runs left in the venvs of ``pythons`` (``<venv>/bin/python``),
        then place the store's bytecode into each venv whose store record has users it lacks."""
        for py in dict.fromkeys(Path(p) for p in pythons):
            venv = py.parent.parent
            try:
                n = await harvest_stale(venv, py)
            except (RuntimeError, OSError) as e:  # speed only: the processes then learn again
                self._say(f"bytecode: {e}")
                continue
            if n:
                self._say(
                    f"bytecode: compiled what an earlier run's processes imported into venv {venv.name} "
                    f"({n} files; that run stopped before compiling them); later starts load it instead of "
                    "compiling"
                )
            digest = (read_marker(venv) or {}).get("digest")
            if self.store is not None and isinstance(digest, str):
                self._venvs[venv] = (py, digest)
                await self._place(venv, py, digest)

    async def _interpreter(self, py: Path) -> Interpreter:
        if py not in self._interp:
            self._interp[py] = await in_background(interpreter, py)
        return self._interp[py]

    async def _place(self, venv: Path, py: Path, digest: str) -> None:
        if self.store is None or not (self.store.users(digest) - learned(venv)):
            return
        try:
            got = await in_background(self.store.place, venv, digest, await self._interpreter(py))
            if got.users:
                record_users(venv, got.users)
        except (OSError, subprocess.SubprocessError, IndexError, ValueError) as e:  # speed only
            self._say(f"bytecode: the store was not used for {venv.name}: {e}")
            return
        left = f"; {len(got.rejected)} changed or unusable, so its processes learn again" if got.rejected else ""
        self._say(f"bytecode: {got.placed}/{got.total} files placed from the store into {venv.name}{left}")

    def plan_seed(self, pythons: Sequence[Path], seed: Sequence[str]) -> None:
        """Mark each venv of ``pythons`` that still has no user learned for the ``seed`` (the
        release's start-up sources, relative to ``site-packages``: :mod:`gym_runtime.venvs.seed`),
        before any user of it is made (a Ray head of such a venv reads the shared cache); the
        compile starts with :meth:`start_seed`. Only for venvs whose processes read the shared
        cache: a preloaded parent's and the servers it forks (they report what they compile) and a
        Ray head's; a server started on its own learns under a prefix of its own and sees none of it."""
        if not seed:
            return
        for py in dict.fromkeys(Path(p) for p in pythons):
            if not learned(py.parent.parent):
                self._to_seed[py] = tuple(seed)

    def start_seed(self) -> None:
        """Compile the planned seeds (:meth:`plan_seed`) in the background, one venv after the other,
        once the processes that read them have started (the preloaded parents import beside it: a
        module the seed has not compiled yet the parent compiles itself and reports, and every
        ``.pyc`` lands whole, written to a temporary name and renamed). The harvest's save to the
        store and :meth:`settled` wait for it; :meth:`close` stops it."""
        if self._to_seed and self._seeding is None:
            self._seeding = asyncio.get_running_loop().create_task(self._seed_all())

    async def seeded(self) -> None:
        """Wait for the seeds' compile (:meth:`start_seed`), if any: a private Ray head whose
        processes read the seeded cache starts after it, as they would compile it all again."""
        if self._seeding is not None:
            await asyncio.shield(self._seeding)

    async def _seed_all(self) -> None:
        for py, seed in self._to_seed.items():
            await self._seed(py.parent.parent, py, seed)

    async def _seed(self, venv: Path, py: Path, seed: Sequence[str]) -> None:
        """Compile the ``seed`` sources ``venv`` has, in their order (the preloaded parent's imports
        first), on every core at full priority (the parent's imports follow it); a Ray head of the
        venv is then recorded as a user of the shared cache (the seed holds what it imports)."""
        started = time.monotonic()
        files = await in_background(seed_sources, venv, seed)
        try:
            n = await compile_into_shared(venv, py, files, nice=0)
        except (RuntimeError, OSError) as e:  # speed only: its processes learn as without a seed
            self._say(f"bytecode: the start-up seed was not compiled into {venv.name}: {e}")
            return
        if any(c.key == RAY_HEAD and c.venv == venv and not c.learning for _, _, c in self.caches):
            record_users(venv, {RAY_HEAD})
        self._say(
            f"bytecode: compiled {n} sources the release's processes import at start-up into "
            f"venv {venv.name} in {time.monotonic() - started:.1f}s, beside its processes' start (nothing was "
            "recorded for it)"
        )

    def user(self, python: Path, key: str, name: str, ready_as: str | None = None, report: bool = False) -> Pycache:
        """The cache for process ``name`` run by ``python`` (``<venv>/bin/python``) as user ``key``;
        ``ready_as``: the process whose readiness ends its learning (a preloaded parent's: its
        first server's), else ``name``'s own; ``report``: it lists what it imports rather than
        write bytecode (:class:`Pycache`)."""
        python = Path(python)
        venv = python.parent.parent
        if key == RAY_HEAD and python in self._to_seed and key not in learned(venv):
            cache = Pycache(venv, key, None)  # what the head imports is seeded: it reads the shared cache
        else:
            cache = for_user(venv, key, report)
        self.caches.append((python, name, cache))
        if ready_as is not None:
            self._ready_as[name] = ready_as
        return cache

    def _unsaved(self) -> list[Path]:
        """Venvs whose learned users the store lacks."""
        store = self.store
        return [v for v, (_, digest) in self._venvs.items() if store is not None and learned(v) - store.users(digest)]

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
                new = [f for f in await in_background(sources, cache) if f not in seen]
                try:
                    await compile_into_shared(cache.venv, py, new)
                    seen.update(new)
                    if final:
                        await in_background(finish, [cache])  # never block the loop on rmtree
                        self._finished(name)
                except (RuntimeError, OSError) as e:  # a failed compile costs speed only, never correctness
                    self._say(f"bytecode: {e}")
                    final = True
                if final:
                    pending.remove(entry)
                    self._say(
                        f"bytecode: compiled what {name} imports into venv {cache.venv.name} "
                        f"({len(seen)} files so far); later starts load it instead of compiling"
                    )
            pending += [entry for entry in self.caches[seen_caches:] if entry[2].learning]  # made meanwhile
            seen_caches = len(self.caches)
            await asyncio.sleep(every_s)
        if self.store is not None:
            # the store serves a later, rebuilt venv: its copy waits until every process is ready
            # rather than take the disk and a core from a start (2.4 s of the first warm start after
            # a cold one measured on two cores)
            while not all(ready(self._ready_as.get(name, name)) for _, name, _ in self.caches):
                await asyncio.sleep(every_s)
            if self._seeding is not None:  # what the seed compiles is saved with the rest
                await asyncio.gather(self._seeding, return_exceptions=True)
            await self._save()

    def _finished(self, name: str) -> None:
        """Call :attr:`finished`; what it raises is said and stops neither the harvest nor the save."""
        try:
            self.finished(name)
        except Exception as e:  # noqa: BLE001 - a later restart costs speed only (it then starts on its own)
            self._say(
                f"bytecode: {name}'s next start could not be told its imports are learned: {type(e).__name__}: {e}"
            )

    async def _save(self) -> None:
        if (store := self.store) is None:
            return
        for venv in self._unsaved():
            py, digest = self._venvs[venv]
            try:
                n = await in_background(
                    store.save, venv, digest, await self._interpreter(py), learned(venv), self._stop
                )
            except (OSError, subprocess.SubprocessError, IndexError, ValueError) as e:  # speed only
                self._say(f"bytecode: {venv.name}'s cache was not saved to the store: {e}")
                continue
            if n:
                self._say(
                    f"bytecode: saved {n} compiled files of venv {venv.name} to the store "
                    "(a rebuilt venv starts with them)"
                )

    async def settled(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for the background seed (:meth:`start_seed`) and the
        harvest and save that :meth:`learn` started (``gym-runtime prefetch`` stops only then);
        True when nothing is left to do: every learning user recorded in its venv and, with a
        store, saved to it."""
        tasks = {t for t in (self._seeding, self._task) if t is not None}
        if tasks:
            _, running = await asyncio.wait(tasks, timeout=timeout_s)
            if running:
                return False
        pending = any(c.learning for _, _, c in self.caches)
        return not pending and not (self.store is not None and self._unsaved())

    async def close(self) -> None:
        """Stop a running seed, harvest or save (what it wrote stays valid) and release every
        learning dir."""
        self._stop.set()
        for task in (self._seeding, self._task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        for _, _, c in self.caches:
            c.release()
