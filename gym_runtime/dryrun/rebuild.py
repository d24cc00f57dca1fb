"""Venv rebuilds under ``dry-run --watch``: in the background, one per server directory, while the watch goes on.

An edit of a server directory's install files (``requirements.txt``, ``pyproject.toml``,
``overrides.txt``: :data:`gym_runtime.dryrun.edits.INSTALL_FILES`) starts, with
:meth:`Rebuilds.start`, a task that rebuilds the venv of the server instances whose implementation
lives there (:func:`gym_runtime.supervise.venv_swap.rebuild`: the start's planner and builder).
Nothing running is touched meanwhile: the servers keep serving on their current venv and the watch
keeps taking edits (an edit of their app restarts them on it). Another edit of that directory's
install files while its rebuild runs cancels that rebuild (uv is killed; nothing of it is kept)
and starts one from the files as they are then.

:meth:`Rebuilds.next` hands the watch each finished rebuild, in the order they end, as a
:class:`Rebuilt`: the new venvs, or the error (docs/rollouts.md, "Watching edits"). Moving the
servers onto the new venv is the watch's (:mod:`gym_runtime.dryrun.watch`), between two edits,
so a restart never overlaps another. :meth:`Rebuilds.close` cancels what still runs and waits for
it (uv killed within about two seconds).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_runtime.supervise import venv_swap


@dataclass
class Rebuilt:
    """A finished rebuild of server directory ``server_dir``: its instances ``names`` (config
    order), the install ``files`` whose edit asked for it, ``edited_at`` (``time.perf_counter()``
    of that edit), the seconds it took, and either ``venvs`` (instance -> new
    :class:`~gym_runtime.venvs.build.Venv`; empty when every instance already runs on the venv its
    files give) or ``error`` (a :class:`~gym_runtime.errors.GymRuntimeError`, or any other
    exception the rebuild raised)."""

    server_dir: Path
    names: list[str]
    files: list[str]
    edited_at: float
    seconds: float = 0.0
    venvs: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None


class Rebuilds:
    """The venv rebuilds of one running environment (``env``: its
    :class:`~gym_runtime.runtime.bringup.Environment`); module doc."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self._running: dict[Path, tuple[asyncio.Task, threading.Event]] = {}
        self._done: asyncio.Queue[Rebuilt] = asyncio.Queue()

    def start(self, server_dir: Path, names: list[str], files: list[str], edited_at: float) -> bool:
        """Rebuild the venv of ``names`` (the instances of ``server_dir``) in the background; returns
        whether a rebuild of that directory was under way (it is cancelled, and this one starts once
        it has ended)."""
        previous = self._running.pop(server_dir, None)
        if previous is not None:
            previous[1].set()
        cancel = threading.Event()
        job = Rebuilt(server_dir, list(names), list(files), edited_at)
        task = asyncio.get_running_loop().create_task(self._run(job, cancel, previous[0] if previous else None))
        self._running[server_dir] = (task, cancel)
        return previous is not None

    def running(self) -> list[Path]:
        """The server directories whose rebuild runs."""
        return list(self._running)

    async def _run(self, job: Rebuilt, cancel: threading.Event, previous: asyncio.Task | None) -> None:
        if previous is not None:  # its uv is being killed; two builds of one directory never overlap
            await asyncio.gather(previous, return_exceptions=True)
        t0 = time.perf_counter()
        try:
            if not cancel.is_set():
                job.venvs = await venv_swap.rebuild(self.env, job.names, cancel)
        except Exception as e:  # noqa: BLE001 - handed to the watch, which says a GymRuntimeError and raises the rest
            job.error = e
        job.seconds = time.perf_counter() - t0
        if cancel.is_set():  # superseded by a later edit, or the watch is stopping: nothing to hand over
            return
        if self._running.get(job.server_dir, (None,))[0] is asyncio.current_task():
            del self._running[job.server_dir]
        self._done.put_nowait(job)

    async def next(self) -> Rebuilt:
        """The next finished rebuild (waits for one)."""
        return await self._done.get()

    async def close(self) -> None:
        """Cancel the rebuilds still running and wait until they have ended."""
        running, self._running = list(self._running.values()), {}
        for _, cancel in running:
            cancel.set()
        await asyncio.gather(*(task for task, _ in running), return_exceptions=True)
