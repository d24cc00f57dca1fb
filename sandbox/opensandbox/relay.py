"""One stable HTTP address in front of a server in its OpenSandbox sandbox (docs/runtime.md,
"Sandbox backends").

The server's sandbox endpoint (``GET /v1/sandboxes/{id}/endpoints/{port}`` ->
``host:port/proxy/N``: execd inside the sandbox relays to the server's port) carries a path
prefix, and a Gym client knows a server by ``host`` and ``port`` alone. A :class:`Relay` listens
on the daemon's address (``GYM_RUNTIME_OPENSANDBOX_DAEMON_HOST``), where the head server's
``/server_instances``, Gym's clients on this host and the other servers' sandboxes reach it, and
sends each request to ``http://<endpoint><path>``: Starlette served by uvicorn on the daemon's
loop, httpx as the client, the body read whole (Gym's requests are JSON), the answer streamed
back (server-sent events included), hop-by-hop headers dropped both ways. While the server has
no sandbox (starting, restarting) a request waits up to ``wait_s`` for one, then gets 503
``{"error": {"code": "GR-OSB-NO-SANDBOX", ...}}``; a sandbox that does not answer gives 502.
Every answer given in the server's stead carries the header :data:`NO_SERVER`: those two, and a
502 of execd's proxy (nothing listens on the server's port yet; a Gym server never answers 502
itself), so the readiness probe does not take them for the server's
(:func:`gym_runtime.supervise.readiness.probe`).

A relay's own failures never reach the terminal as tracebacks (uvicorn prints "Exception in ASGI
application" for anything its app raises, cancellation included): :meth:`Relay.stop` first
answers every request still waiting for a sandbox (503, "the relay is stopping"), gives open
answers :data:`STOP_WAIT_S` to end, then cancels the rest, which end quietly; an answer the
sandbox breaks off ends where it broke; any other failure of a request is answered 502 (or, once
the answer started, ends it) and logged in one line at ``INFO``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gym_runtime.serving import LoopServer
from gym_runtime.sockets import listening_socket

from . import NO_SERVER

HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
}
log = logging.getLogger("sandbox.opensandbox")
STOP_WAIT_S = 1.0  # open answers get this long to end when the relay stops, then are cancelled
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)  # ip(7)


def free_bind(sock: socket.socket) -> None:
    """Let ``sock`` bind an address this host does not have yet (``IP_FREEBIND``, ip(7)): a
    container bridge's gateway exists only once its first sandbox runs, after the relays start."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_IP if sock.family == socket.AF_INET else socket.IPPROTO_IPV6, IP_FREEBIND, 1)


class Relay:
    """``Relay(name)``; ``await start(host)`` -> ``(host, port)``; ``point(endpoint)`` (``host:port/proxy/N``,
    or None while there is no sandbox); ``await stop()``."""

    def __init__(self, name: str, wait_s: float = 30.0) -> None:
        self.name = name
        self.wait_s = wait_s
        self.endpoint: str | None = None
        self.address: tuple[str, int] | None = None
        self._changed = asyncio.Event()
        self._stopping = False
        self._open: set[asyncio.Task] = set()  # the tasks answering requests now
        self._client = httpx.AsyncClient(
            trust_env=False, timeout=None, limits=httpx.Limits(max_connections=None, max_keepalive_connections=64)
        )
        self._app = Starlette(routes=[Route("/{path:path}", self._forward, methods=METHODS)])
        self._serving = LoopServer(self._guarded, interface="asgi3", server_header=False, date_header=False)

    async def start(self, host: str) -> tuple[str, int]:
        sock = listening_socket(host, reuse=True, prepare=free_bind)
        sock.setblocking(False)
        await self._serving.serve([sock])
        self.address = sock.getsockname()[:2]
        return self.address

    def point(self, endpoint: str | None) -> None:
        self.endpoint = endpoint
        self._changed.set()
        self._changed = asyncio.Event()

    async def stop(self) -> None:
        """Stop serving (module doc: no request is left to be cancelled by the loop's end). Idempotent."""
        self._stopping = True
        self.point(self.endpoint)  # wake the requests waiting for a sandbox: they answer 503
        if self._open:
            await asyncio.wait(list(self._open), timeout=STOP_WAIT_S)
        for task in list(self._open):
            task.cancel()
        if self._open:
            await asyncio.wait(list(self._open), timeout=STOP_WAIT_S)
        await self._serving.stop()
        await self._client.aclose()

    async def _guarded(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The relay's ASGI app: :meth:`_forward` through Starlette, its failures kept off the
        terminal (module doc)."""
        started = False

        async def sending(message: MutableMapping[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        task = asyncio.current_task()
        if task is not None:
            self._open.add(task)
        try:
            await self._app(scope, receive, sending)
        except asyncio.CancelledError:  # stop() (or the loop's end) cancelled this request
            with contextlib.suppress(Exception):
                await self._instead(sending, started, 503, "the relay is stopping", "relay stopping")
        except Exception as e:
            log.info(
                "relay %s: %s %s failed: %s: %s", self.name, scope.get("method"), scope.get("path"), type(e).__name__, e
            )
            with contextlib.suppress(Exception):
                await self._instead(sending, started, 502, f"the relay failed: {type(e).__name__}", "relay failed")
        finally:
            self._open.discard(task)

    async def _instead(self, send: Any, started: bool, status: int, words: str, why: str) -> None:
        """Answer ``status`` with a ``GR-OSB-NO-SANDBOX`` body in the server's stead (raw ASGI);
        an answer already ``started`` is ended where it is instead."""
        if started:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        body = JSONResponse({"error": {"code": "GR-OSB-NO-SANDBOX", "message": f"{self.name}: {words}"}}).body
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (NO_SERVER.encode(), why.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _body(self, upstream: httpx.Response) -> AsyncIterator[bytes]:
        """The sandbox's answer as it comes; one it breaks off ends there (logged)."""
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
        except httpx.HTTPError as e:
            log.info("relay %s: the sandbox's answer broke off: %s", self.name, type(e).__name__)

    async def _target(self) -> str | None:
        deadline = asyncio.get_running_loop().time() + self.wait_s
        while self.endpoint is None and not self._stopping:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return None
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        return None if self._stopping else self.endpoint

    async def _forward(self, request: Request) -> Response:
        body = await request.body()
        endpoint = await self._target()
        if endpoint is None:
            words = (
                "the relay is stopping" if self._stopping else f"no sandbox runs the server (waited {self.wait_s:g}s)"
            )
            return JSONResponse(
                {"error": {"code": "GR-OSB-NO-SANDBOX", "message": f"{self.name}: {words}"}},
                status_code=503,
                headers={NO_SERVER: "relay stopping" if self._stopping else "no sandbox"},
            )
        url = f"http://{endpoint.rstrip('/')}{request.url.path}" + (
            f"?{request.url.query}" if request.url.query else ""
        )
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP]
        try:
            upstream = await self._client.send(
                self._client.build_request(request.method, url, headers=headers, content=body), stream=True
            )
        except httpx.HTTPError as e:
            return JSONResponse(
                {
                    "error": {
                        "code": "GR-OSB-NO-SANDBOX",
                        "message": f"{self.name}: its sandbox at {endpoint} did not answer: {type(e).__name__}",
                    }
                },
                status_code=502,
                headers={NO_SERVER: "sandbox not answering"},
            )
        response = StreamingResponse(
            self._body(upstream), status_code=upstream.status_code, background=BackgroundTask(upstream.aclose)
        )
        response.raw_headers = [
            (k.encode("latin-1"), v.encode("latin-1"))
            for k, v in upstream.headers.multi_items()
            if k.lower() not in HOP | {NO_SERVER}
        ]
        if upstream.status_code == 502:  # execd's proxy: nothing listens on the server's port (yet)
            response.raw_headers.append((NO_SERVER.encode(), b"not listening"))
        return response
