"""Task sandboxes end with the server process that made them (both task-sandbox services)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any


class ProcessEnds:
    """Runs ``on_end(proc)`` once a server process ends, at most one watch per process object.

    ``proc`` is what supervision hands a service as the owner's incarnation: anything with an
    awaitable ``wait()`` (a process without one is not watched). The watches are tasks of the
    running loop, cancelled by :meth:`cancel`."""

    def __init__(self) -> None:
        self._watching: set[int] = set()
        self.tasks: set[asyncio.Task] = set()

    def follow(self, proc: Any, on_end: Callable[[Any], Awaitable[object]]) -> None:
        if proc is None or id(proc) in self._watching or not hasattr(proc, "wait"):
            return
        self._watching.add(id(proc))

        async def ended() -> None:
            with contextlib.suppress(Exception):
                await proc.wait()
            self._watching.discard(id(proc))
            await on_end(proc)

        self.spawn(ended())

    def spawn(self, coro: Awaitable[None]) -> None:
        """Run ``coro`` as a task kept until it ends (or :meth:`cancel`)."""
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def cancel(self) -> None:
        for t in list(self.tasks):
            t.cancel()
