"""A published port's forward closes both sockets of a connection once both directions ended
(found by the reliability suite: a connection whose server closed first, then its client, kept its
two file descriptors in the daemon for the daemon's lifetime, about 2 fds per rollout)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from sandbox import EgressPolicy, ProcessSpec, Sandbox
from tests.sandbox._run import APPS


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _get(host: str, port: int) -> bytes:
    """HTTP/1.0 GET read to the end: the server closes first, then this client."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"GET / HTTP/1.0\r\n\r\n")
    body = await reader.read()
    writer.close()
    await writer.wait_closed()
    return body


def test_forwarded_connections_leave_no_descriptor(tmp_path: Path, plain_python: Path) -> None:
    async def main() -> list[int]:
        sb = await Sandbox.start(EgressPolicy.from_environ({}), tmp_path / "sb")
        try:
            port = sb.allocate_port()
            peer = sb.spawn(
                ProcessSpec(
                    "peer",
                    [str(plain_python), str(APPS / "peer_server.py"), str(port)],
                    tmp_path,
                    {"PATH": "/usr/bin"},
                    read_only_paths=[APPS, plain_python.parent.parent],
                )
            )
            host, hport = await sb.publish(port)
            for _ in range(400):  # until the peer listens (the forward resets connections before)
                try:
                    if (await _get(host, hport)).endswith(f"peer {port}".encode()):
                        break
                except OSError:
                    pass
                await asyncio.sleep(0.05)
            counts = [_fds()]
            for _ in range(3):  # each round: 60 connections, one after the other (a one-thread server)
                answers = [await _get(host, hport) for _ in range(60)]
                assert all(a.endswith(f"peer {port}".encode()) for a in answers)
                await asyncio.sleep(0.3)
                counts.append(_fds())
            await peer.stop(2)
            return counts
        finally:
            await sb.close()

    counts = asyncio.run(main())
    # a leak keeps 2 descriptors per connection (120 per round); the holder's socket pool adds at most 32
    assert max(counts) - counts[0] <= 40, counts
