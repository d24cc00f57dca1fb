"""Stable addresses on the daemon's node (docs/scale-out.md "Stable addresses").

A Gym server finds its peers through the ``host``/``port`` it got at boot, so every server
instance keeps one address for the life of the environment, wherever its replicas run and after
they move. :class:`ReplicaAddress` is a TCP listener on the daemon's node address that splices
each connection to where its replica runs now (``node address:port`` reported by the node); while
the replica has no address (being placed, restarting, its node lost) connections are refused, so
readiness probes wait and clients retry. An instance with one replica is reached at its replica's
address; more replicas stand behind one HTTP router (:mod:`gym_runtime.placement.router`).

Cost: one splice in the daemon's event loop per connection (bytes copied twice on the daemon's
node; about 0.1 ms added per request on a LAN); all server-to-server traffic crosses the
daemon's node.
"""

from __future__ import annotations

import asyncio
import socket

from sandbox.proxy import host_dial, serve_forward


class ReplicaAddress:
    """One replica's stable address. ``await start(host)`` -> ``(host, port)``; ``point(addr)``
    sets where connections go (``None``: refuse them); ``close()``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.target: tuple[str, int] | None = None
        self.address: tuple[str, int] | None = None
        self._server: asyncio.AbstractServer | None = None

    async def start(self, host: str) -> tuple[str, int]:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((host, 0))
        sock.listen(512)
        sock.setblocking(False)
        self._server = await serve_forward(sock, self._dial)
        self.address = sock.getsockname()[:2]
        return self.address

    def point(self, target: tuple[str, int] | None) -> None:
        self.target = (target[0], target[1]) if target is not None else None  # a list read from JSON too

    async def _dial(self) -> socket.socket:
        target = self.target
        if target is None:
            raise ConnectionRefusedError(f"{self.name} has no running replica right now")
        return await host_dial(*target)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
