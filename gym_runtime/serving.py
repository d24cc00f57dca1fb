"""ASGI apps served by uvicorn on the daemon's own event loop, from sockets bound here.

The head server, the task-sandbox API, the OpenSandbox gate, the replica router and the
OpenSandbox relays all run this way: the caller binds its sockets first (no probe-then-release
race), uvicorn's signal handling stays off (the daemon owns SIGTERM and SIGINT), and a stop ends
open requests within a bound. Their listening sockets come from :mod:`gym_runtime.sockets`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn

from gym_runtime.sockets import listening_socket

QUIET: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": "off", "timeout_keep_alive": 60}


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the daemon handles signals itself
        yield


class LoopServer:
    """``app`` (ASGI) under uvicorn with ``options`` added to :data:`QUIET` (``uvicorn.Config``'s
    keywords); :meth:`serve` on sockets the caller bound, :meth:`stop` (idempotent)."""

    def __init__(self, app: Any, **options: Any) -> None:
        self._server = _Server(uvicorn.Config(app, **(QUIET | options)))
        self._task: asyncio.Task | None = None

    async def serve(self, socks: list[socket.socket]) -> None:
        """Returns once uvicorn listens on ``socks``; raises what uvicorn raised if it ended first."""
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=socks))
        while not self._server.started:
            if self._task.done():
                self._task.result()
                return
            await asyncio.sleep(0.005)

    async def stop(self, wait_s: float = 3.0) -> None:
        """Stop serving; open requests get at most ``wait_s`` seconds (then uvicorn's task is left)."""
        if self._task is not None:
            self._server.should_exit = self._server.force_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, wait_s)
            self._task = None


class LoopbackListener(LoopServer):
    """A :class:`LoopServer` on a socket of its own at a free port of ``host`` (``url``), or on
    ``sock``, a listening socket the caller bound earlier, which it then owns."""

    def __init__(self, app: Any, host: str = "127.0.0.1", sock: socket.socket | None = None, **options: Any) -> None:
        super().__init__(app, **options)
        self.sock = sock if sock is not None else listening_socket(host)
        self.host, self.port = self.sock.getsockname()[:2]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        await self.serve([self.sock])

    async def stop(self, wait_s: float = 3.0) -> None:
        """Stop serving and close the socket (idempotent)."""
        await super().stop(wait_s)
        with contextlib.suppress(OSError):
            self.sock.close()
