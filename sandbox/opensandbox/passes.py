"""One pass per interval for the questions every server's handle asks execd (docs/runtime.md,
"Many sandboxes at once"): its command's status (has the server exited?) and its log from the
cursor.

Asked by each handle on its own clock (status every 0.5 s, log every 0.25 s), tens of servers made
tens of requests a second, each on a timer of its own. :class:`Passes` gathers the questions asked
since the last pass and answers them all in the next one, every :data:`EVERY_S`, at most
:data:`AT_ONCE` calls in flight, each bounded by ``call_s``: one status call and one log read per
server per pass, and an exit is seen within :data:`EVERY_S` plus the pass's own time (under 2 s
at tens of servers; ``bench/opensandbox_watch.py`` measures it). execd has no call answering for
several commands (opensandbox 1.1.1), and the lifecycle server's list gives sandbox states, which a
server's exit does not change, so one call per server per pass is the floor.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

EVERY_S = 1.0
AT_ONCE = 16


class Passes:
    """``every_s``: seconds between the starts of two passes; ``at_once``: calls in flight at once;
    ``call_s``: the longest one call may take (then it raises ``TimeoutError`` to its asker).
    ``calls``: calls made so far; ``passes``: passes made. ``close()`` ends the pass task and fails
    whatever still waits with ``asyncio.CancelledError``."""

    def __init__(self, every_s: float = EVERY_S, at_once: int = AT_ONCE, call_s: float = 3.0) -> None:
        self.every_s, self.at_once, self.call_s = every_s, at_once, call_s
        self._waiting: list[tuple[Callable[[], Awaitable[Any]], asyncio.Future]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.calls = 0
        self.passes = 0

    async def ask(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """``await call()`` in the next pass; returns what it returned, raises what it raised."""
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting.append((call, fut))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        self._wake.set()
        return await fut

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.every_s)
            batch, self._waiting = self._waiting, []
            self._wake.clear()
            gate = asyncio.Semaphore(self.at_once)
            self.passes += 1
            await asyncio.gather(*(self._one(gate, c, f) for c, f in batch))

    async def _one(self, gate: asyncio.Semaphore, call: Callable[[], Awaitable[Any]], fut: asyncio.Future) -> None:
        if fut.done():  # its asker went away
            return
        async with gate:
            self.calls += 1
            try:
                result = await asyncio.wait_for(call(), self.call_s)
            except Exception as e:
                if not fut.done():
                    fut.set_exception(e)
                return
            if not fut.done():
                fut.set_result(result)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None
        for _, fut in self._waiting:
            fut.cancel()
        self._waiting = []
