"""The egress proxy holds each connection's handler until it ends, and every upstream it opened is
closed once its client is gone (also when the client resets mid-request): nothing is left to the
garbage collector ("Task was destroyed but it is pending!") and no upstream socket leaks."""

from __future__ import annotations

import asyncio
import gc
import socket
import struct

from sandbox import proxy as proxy_mod
from sandbox.policy import EgressPolicy
from sandbox.proxy import EgressProxy, host_dial


async def _run() -> tuple[int, int, int]:
    closed = 0
    accepted = 0

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted, closed
        accepted += 1
        while await reader.read(65536):
            pass
        closed += 1
        writer.close()

    peer = await asyncio.start_server(upstream, "127.0.0.1", 0)
    peer_port = peer.sockets[0].getsockname()[1]
    release = asyncio.Event()

    async def slow_dial(ip: str, port: int) -> socket.socket:
        await release.wait()  # the handler is mid-flight while its client goes away
        return await host_dial(ip, port)

    policy = EgressPolicy.from_environ({})
    proxy = EgressProxy(policy, lambda event: None, loopback_dial=slow_dial)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    server = await proxy.serve(listener, "srv")
    port = listener.getsockname()[1]
    clients = []
    for _ in range(20):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(f"CONNECT 127.0.0.1:{peer_port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await w.drain()
        clients.append((r, w))
    await asyncio.sleep(0.2)
    held = len(proxy_mod._tasks)
    for i, (_r, w) in enumerate(clients):
        if i % 2:  # half reset their connection, half close it cleanly
            w.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        w.close()
    gc.collect()
    release.set()
    for _ in range(100):
        await asyncio.sleep(0.05)
        if not proxy_mod._tasks and closed == accepted:
            break
    server.close()
    peer.close()
    return held, len(proxy_mod._tasks), closed - accepted


def test_handlers_are_held_until_they_end_and_close_their_upstream() -> None:
    held, left, unclosed = asyncio.run(_run())
    assert held >= 20  # one handler per connection, held while it waits on its upstream
    assert left == 0 and unclosed == 0
