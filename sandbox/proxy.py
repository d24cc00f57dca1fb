"""The allowlisting HTTP proxy and the plain TCP forwards, both asyncio (docs/architecture.md §6).

Proxy: ``CONNECT host:port`` and absolute-URI requests (``GET http://host:port/path``). Host and
port come from the authority / URI, never from ``Host:``. The policy decides on the name the
client sent; for a name, the proxy resolves it itself (injected ``resolver`` or the system's),
checks *every* resolved address and connects to a checked one (no second lookup). A denial is a
``403`` with ``X-Sandbox-Deny: <rule>``, is logged (``egress DENY``) and handed to ``on_deny``; a
request it cannot parse (``400``) or a name that does not resolve or a connection that fails
(``502``) is no denial: ``X-Sandbox-Error: <what failed>``, logged ``egress FAILED``. Absolute-URI
requests are forwarded in origin-form with ``Proxy-*`` headers stripped and ``Connection: close``
(one request per connection). Every socket gets TCP_NODELAY (Nagle + delayed ACK cost 43 ms here).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import socket
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from .policy import EgressPolicy, parse_ip_literal

log = logging.getLogger("sandbox.egress")
Resolver = Callable[[str], "list[str] | Awaitable[list[str]]"]
# (ip, port) -> connected non-blocking socket; used for loopback peers (inside the sandbox netns).
Dialer = Callable[[str, int], Awaitable[socket.socket]]
MAX_HEAD = 64 * 1024
HEAD_TIMEOUT_S = 30.0  # a client must send its request head within this
_tasks: set[asyncio.Task] = set()  # strong references: the forwards' dial tasks, the proxy's handlers
_HOP = {"proxy-connection", "proxy-authorization", "proxy-authenticate", "connection", "keep-alive"}


def nodelay(sock: socket.socket | None) -> None:
    """Set TCP_NODELAY when ``sock`` is a TCP socket (no-op otherwise)."""
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


async def host_dial(ip: str, port: int) -> socket.socket:
    """Connect from the daemon's own network namespace; returns a connected non-blocking socket."""
    fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    s.setblocking(False)
    nodelay(s)
    return await connect_or_close(s, ip, port)


async def connect_or_close(s: socket.socket, ip: str, port: int) -> socket.socket:
    """Connect the non-blocking socket ``s`` to ``ip:port``; close it if that fails or is cancelled."""
    try:
        await asyncio.get_running_loop().sock_connect(s, (ip, port))
    except BaseException:
        s.close()
        raise
    return s


async def system_resolve(host: str) -> list[str]:
    """Addresses for ``host`` from the system resolver (daemon side), de-duplicated, in order."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(i[4][0]) for i in infos))


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except (OSError, RuntimeError):
            pass


async def splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter], b: tuple[asyncio.StreamReader, asyncio.StreamWriter]
) -> None:
    """Copy both ways until both sides are done, then close both writers."""
    try:
        await asyncio.gather(_pump(a[0], b[1]), _pump(b[0], a[1]))
    finally:
        for w in (a[1], b[1]):
            w.close()


async def open_streams(sock: socket.socket) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """asyncio streams over an already connected socket (TCP_NODELAY set)."""
    nodelay(sock)
    return await asyncio.open_connection(sock=sock)


class EgressProxy:
    """Per-sandbox proxy handler; ``serve(sock, server)`` starts it on a listening socket.

    ``server`` names which sandboxed server owns that listener (one listener per server), so
    denials carry the server. ``loopback_dial`` connects to loopback peers (inside the netns).
    """

    def __init__(
        self,
        policy: EgressPolicy,
        on_deny: Callable[[dict], None],
        resolver: Resolver | None = None,
        loopback_dial: Dialer = host_dial,
    ) -> None:
        self.policy = policy
        self.on_deny = on_deny
        self.resolver = resolver
        self.loopback_dial = loopback_dial
        self.connections = 0

    async def serve(self, sock: socket.socket, server: str | None) -> asyncio.AbstractServer:
        """Start serving on ``sock`` (listening, any namespace); returns the asyncio server.

        Each connection's handler task is held in :data:`_tasks` until it ends: asyncio's stream
        protocol holds it weakly or not at all (CPython 3.11 keeps no reference; 3.12 drops it when
        the client's connection is lost), so a handler still waiting on its upstream could be
        garbage-collected mid-flight ("Task was destroyed but it is pending!") and leak that socket."""

        def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.ensure_future(self._handle(reader, writer, server))
            _tasks.add(task)
            task.add_done_callback(_tasks.discard)

        return await asyncio.start_server(accepted, sock=sock)

    async def _resolve(self, host: str) -> list[str]:
        if self.resolver is None:
            return await system_resolve(host)
        out = self.resolver(host)
        return list(await out) if inspect.isawaitable(out) else list(out)

    async def _refuse(
        self,
        writer: asyncio.StreamWriter,
        server: str | None,
        host: str,
        port: int,
        rule: str,
        status: str = "403 Forbidden",
    ) -> None:
        if status.startswith("403"):
            log.warning("egress DENY server=%s host=%s port=%s rule=%s", server, host, port, rule)
            self.on_deny({"server": server, "host": host, "port": port, "rule": rule})
            body, header = f"egress denied by sandbox policy: {host}:{port} ({rule})\n".encode(), "X-Sandbox-Deny"
        else:  # a bad request or a failed lookup or connection: what it is, never a denial
            log.warning(
                "egress FAILED server=%s host=%s port=%s: %s (%s; not a policy denial)",
                server,
                host,
                port,
                rule,
                status,
            )
            body, header = f"egress failed, not denied: {host}:{port}: {rule}\n".encode(), "X-Sandbox-Error"
        writer.write(
            f"HTTP/1.1 {status}\r\n{header}: {rule}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        try:
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        writer.close()

    async def _connect(
        self, host: str, port: int, server: str | None, writer: asyncio.StreamWriter
    ) -> socket.socket | None:
        """Decide, resolve, re-check and connect; on refusal answer the client and return None."""
        decision = self.policy.decide(host, port)
        if not decision.allowed:
            await self._refuse(writer, server, host, port, decision.rule)
            return None
        literal = parse_ip_literal(host)
        try:
            if decision.rule == "loopback-peer":
                return await self.loopback_dial("127.0.0.1" if host.lower() == "localhost" else str(literal), port)
            addrs = [str(literal)] if literal is not None else await self._resolve(host.strip("[]").rstrip("."))
            if not addrs:
                raise OSError(f"no address for {host}")
            if decision.rule != "policy-endpoint":
                decision = self.policy.decide(host, port, addrs)
                if not decision.allowed:
                    await self._refuse(writer, server, host, port, decision.rule)
                    return None
            last: Exception | None = None
            for ip in addrs:
                try:
                    return await asyncio.wait_for(host_dial(ip, port), 10)
                except (TimeoutError, OSError) as e:
                    last = e
            raise OSError(f"connect {host}:{port} failed: {last}")
        except OSError as e:
            await self._refuse(writer, server, host, port, f"upstream-error: {e}", "502 Bad Gateway")
            return None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: str | None) -> None:
        self.connections += 1
        nodelay(writer.get_extra_info("socket"))
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()  # no request head in time (an idle connection must not hold a descriptor forever)
            return
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            await self._refuse(writer, server, "?", 0, "bad-request", "400 Bad Request")
            return
        method, target, version = parts
        try:  # urllib raises ValueError for a port that is not a number in 0-65535 or a broken [IPv6]
            if method == "CONNECT":
                url = urlsplit(f"//{target}")
                host, port = url.hostname or "", url.port or 443
            else:
                url = urlsplit(target)
                if url.scheme != "http" or not url.hostname:
                    await self._refuse(writer, server, target[:100], 0, "not-absolute-http-uri", "400 Bad Request")
                    return
                host, port = url.hostname, url.port or 80
        except ValueError as e:
            await self._refuse(writer, server, target[:100], 0, f"bad-target: {e}", "400 Bad Request")
            return
        sock = await self._connect(host, port, server, writer)
        if sock is None:
            return
        log.debug("egress ALLOW server=%s host=%s port=%s", server, host, port)
        up = await open_streams(sock)
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            path = url.path or "/"
            if url.query:
                path += "?" + url.query
            keep = [ln for ln in lines[1:] if ln and ln.split(":", 1)[0].strip().lower() not in _HOP]
            up[1].write(
                ("\r\n".join([f"{method} {path} {version}", *keep, "Connection: close"]) + "\r\n\r\n").encode("latin-1")
            )
        await splice((reader, writer), up)


class _Half(asyncio.Protocol):
    """One side of a protocol-level splice: writes what it receives to its peer's transport, with
    flow control both ways (about twice as fast as streams under 100 concurrent connections)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Half | None = None
        self.pending: list[bytes] = []
        self.eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream protocol's transport is an asyncio.Transport
        nodelay(transport.get_extra_info("socket"))

    def link(self, peer: _Half) -> None:
        self.peer, peer.peer = peer, self
        for side in (self, peer):
            if side.pending:
                side.peer.transport.write(b"".join(side.pending))  # type: ignore[union-attr]  # paired sides are both connected
                side.pending.clear()
            if side.eof and side.peer.transport.can_write_eof():  # type: ignore[union-attr]  # paired sides are both connected
                side.peer.transport.write_eof()  # type: ignore[union-attr]  # paired sides are both connected

    def data_received(self, data: bytes) -> None:
        if self.peer is None or self.peer.transport is None:
            self.pending.append(data)
        else:
            self.peer.transport.write(data)

    def eof_received(self) -> bool:
        self.eof = True
        if self.peer is not None and self.peer.transport is not None and self.peer.transport.can_write_eof():
            self.peer.transport.write_eof()
        if self.peer is not None and self.peer.eof:  # both directions are done: nothing keeps the pair open
            self.peer.transport.close()  # type: ignore[union-attr]  # a peer that sent EOF is connected
            return False  # asyncio closes this side
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


async def serve_forward(sock: socket.socket, dial: Callable[[], Awaitable[socket.socket]]) -> asyncio.AbstractServer:
    """A plain TCP forward: every connection accepted on ``sock`` is spliced to ``dial()``."""
    loop = asyncio.get_running_loop()

    def accepted() -> _Half:
        down = _Half()

        async def connect() -> None:
            try:
                up_sock = await dial()
                _, up = await loop.create_connection(_Half, sock=up_sock)
            except OSError as e:
                log.info("forward to upstream failed: %s", e)
                if down.transport is not None:
                    down.transport.close()
                return
            if down.transport is None or down.transport.is_closing():
                up.transport.close()  # type: ignore[union-attr]  # up is connected once down is
                return
            down.link(up)

        task = loop.create_task(connect())
        _tasks.add(task)
        task.add_done_callback(_tasks.discard)
        return down

    return await loop.create_server(accepted, sock=sock)
