"""The exit half of :class:`sandbox.SandboxedProcess`'s protocol for a server that runs elsewhere
(an OpenSandbox sandbox, a Ray node): no local pid, an exit recorded once by the handle's own
watcher task, which sets ``_done`` when the handle is finished."""

from __future__ import annotations

import asyncio

from sandbox.process import ExitInfo


class ElsewhereExit:
    """``returncode``, ``poll``, ``exit_info``, ``mark``, ``app_pid`` (None) and ``wait`` from the
    recorded :class:`ExitInfo`; subclasses record it with :meth:`_end` and set ``_done``."""

    pid = None
    pidfd = None

    def __init__(self) -> None:
        self._exit: ExitInfo | None = None
        self._reason: str | None = None
        self._detail = ""
        self._done = asyncio.Event()

    @property
    def returncode(self) -> int | None:
        return self._exit.returncode if self._exit else None

    def poll(self) -> int | None:
        return self.returncode

    def exit_info(self) -> ExitInfo | None:
        return self._exit

    def mark(self, reason: str, detail: str = "") -> None:
        """The reason the next exit is given (the first mark wins), e.g. ``terminated`` by a stop."""
        if self._reason is None:
            self._reason, self._detail = reason, detail

    def app_pid(self) -> int | None:
        return None

    async def wait(self) -> int | None:
        await self._done.wait()
        return self.returncode

    def _end(self, returncode: int | None, reason: str, detail: str) -> bool:
        """Record the exit unless one is recorded; True when this call recorded it."""
        if self._exit is not None:
            return False
        self._exit = ExitInfo(returncode, reason, detail)
        return True
