"""Sockets of the daemon's own listeners: a listening socket bound here, and a free port's number
(:func:`free_port`, for a server that binds its port itself). Plain ``socket`` calls: a caller that
needs only these does not import the ASGI stack of :mod:`gym_runtime.serving`.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from gym_runtime.errors import StartError


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
