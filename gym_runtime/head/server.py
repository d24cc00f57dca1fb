"""Serve the head app with uvicorn on the daemon's own event loop, on a socket the daemon bound.

The socket is bound before anything starts (no probe-then-release race; a taken port is reported
with its owner, case C04). uvicorn's signal handling is disabled: the daemon owns SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from starlette.applications import Starlette

from gym_runtime.head.app import begin_close, open_batches
from gym_runtime.serving import LoopServer


class HeadServer:
    """``await start()`` serves ``app`` (:func:`gym_runtime.head.app.create_app`) on ``sock`` (its
    address is :attr:`url`) and on ``more`` listening sockets (e.g. the servers' own listener);
    ``await stop()`` ends running rollout batches (:meth:`close_batches`), then closes them all
    (idempotent)."""

    def __init__(self, app: Starlette, sock: socket.socket, more: list[socket.socket] | None = None) -> None:
        self.sock = sock
        self.socks = [sock, *(more or [])]
        host, port = sock.getsockname()[:2]
        self.host, self.port = host, port
        self._serving = LoopServer(app, timeout_graceful_shutdown=1, timeout_keep_alive=30)
        self._app = app
        self._started = False

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        self._started = True
        await self._serving.serve(self.socks)

    async def close_batches(self, wait_s: float = 3.0) -> None:
        """End running ``/rollouts/run`` batches with the shutdown error body (app.py) and wait up
        to ``wait_s`` seconds for their answers to finish; the server keeps serving."""
        begin_close(self._app)
        until = asyncio.get_running_loop().time() + wait_s
        while open_batches(self._app) and asyncio.get_running_loop().time() < until:
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        await self.close_batches()
        await self._serving.stop()
        for sock in self.socks:
            with contextlib.suppress(OSError):
                sock.close()
