"""Serve the head app with uvicorn on the daemon's own event loop, on a socket the daemon bound.

The socket is bound before anything starts (no probe-then-release race; a taken port is reported
with its owner, case C04). uvicorn's signal handling is disabled: the daemon owns SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI

from gym_runtime.head.app import begin_close, open_batches


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the daemon handles signals itself
        yield

    def install_signal_handlers(self) -> None:  # older uvicorn
        return None


class HeadServer:
    """``await start()`` serves ``app`` (:func:`gym_runtime.head.app.create_app`) on ``sock`` (its
    address is :attr:`url`) and on ``more`` listening sockets (e.g. the servers' own listener);
    ``await stop()`` ends running rollout batches (:meth:`close_batches`), then closes them all
    (idempotent)."""

    def __init__(self, app: FastAPI, sock: socket.socket, more: list[socket.socket] | None = None) -> None:
        self.sock = sock
        self.socks = [sock, *(more or [])]
        host, port = sock.getsockname()[:2]
        self.host, self.port = host, port
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=1, timeout_keep_alive=30)
        self._server = _Server(config)
        self._app = app
        self._task: asyncio.Task | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=self.socks))
        while not self._server.started:
            if self._task.done():
                self._task.result()
                return
            await asyncio.sleep(0.005)

    async def close_batches(self, wait_s: float = 3.0) -> None:
        """End running ``/rollouts/run`` batches with the shutdown error body (app.py) and wait up
        to ``wait_s`` seconds for their answers to finish; the server keeps serving."""
        begin_close(self._app)
        until = asyncio.get_running_loop().time() + wait_s
        while open_batches(self._app) and asyncio.get_running_loop().time() < until:
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._task is None:
            return
        await self.close_batches()
        self._server.should_exit = True
        self._server.force_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._task, 3)
        self._task = None
        for sock in self.socks:
            with contextlib.suppress(OSError):
                sock.close()
