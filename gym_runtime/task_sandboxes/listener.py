"""An HTTP app served on the daemon's own event loop, from a socket bound to loopback here.

Used by the task-sandbox API (:mod:`gym_runtime.task_sandboxes.api`) and the OpenSandbox gate
(:mod:`gym_runtime.task_sandboxes.osb_gate`): both must be reachable before the servers that use
them start, and must end with the daemon without touching its signal handling.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the daemon handles signals itself
        yield


class LoopbackListener:
    """``app`` (ASGI) on ``host`` at a free port (``url``), with uvicorn ``options`` added to the
    quiet defaults (no access log, no lifespan, 60 s keep-alive)."""

    def __init__(self, app: Any, host: str = "127.0.0.1", **options: Any) -> None:
        # IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets of that protocol; without it, an
        # answer's head and body wait for the client's delayed ACK (40 ms a call)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.bind((host, 0))
        self.sock.listen(512)
        self.host, self.port = self.sock.getsockname()[:2]
        config = dict(log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=60) | options
        self._server = _Server(uvicorn.Config(app, **config))
        self._task: asyncio.Task | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        """Serve; returns once uvicorn listens. Raises what uvicorn raised if it ended before."""
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[self.sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
                return
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        """Stop serving (at most 3 s for open requests) and close the socket; idempotent."""
        if self._task is not None:
            self._server.should_exit = self._server.force_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 3)
            self._task = None
        with contextlib.suppress(OSError):
            self.sock.close()
