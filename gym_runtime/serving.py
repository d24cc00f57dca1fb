"""ASGI apps served by uvicorn on the daemon's own event loop, from sockets bound here.

The head server, the task-sandbox API, the OpenSandbox gate, the replica router and the
OpenSandbox relays all run this way: the caller binds its sockets first (no probe-then-release
race), uvicorn's signal handling stays off (the daemon owns SIGTERM and SIGINT), and a stop ends
open requests within a bound. Beside them: a listening socket, and a free port's number
(:func:`free_port`, for a server that binds its port itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from gym_runtime.errors import StartError

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


def listening_socket(
    host: str, port: int = 0, *, reuse: bool = False, prepare: Callable[[socket.socket], None] | None = None
) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: a free port) and listening (backlog 512), IPv6 when
    ``host`` holds a colon; ``reuse`` sets ``SO_REUSEADDR``, ``prepare`` runs before the bind. ``IPPROTO_TCP``: asyncio sets ``TCP_NODELAY`` only on sockets of that
    protocol; without it an answer's head and body wait for the client's delayed ACK (40 ms a call)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        if reuse:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if prepare is not None:
            prepare(sock)
        sock.bind((host, port))
        sock.listen(512)
    except BaseException:
        sock.close()
        raise
    return sock


def free_port(host: str = "127.0.0.1", avoid: set[int] | frozenset[int] = frozenset()) -> int:
    """A port the OS reports free on ``host``, not in ``avoid`` (the run's assigned ports)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port
    raise StartError("no free port found on " + host, code="GR-START-PORT")


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
