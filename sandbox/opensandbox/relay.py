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
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gym_runtime.serving import LoopServer, listening_socket

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
        self._client = httpx.AsyncClient(
            trust_env=False, timeout=None, limits=httpx.Limits(max_connections=None, max_keepalive_connections=64)
        )
        app = Starlette(routes=[Route("/{path:path}", self._forward, methods=METHODS)])
        self._serving = LoopServer(app, server_header=False, date_header=False)

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
        await self._serving.stop()
        await self._client.aclose()

    async def _target(self) -> str | None:
        deadline = asyncio.get_running_loop().time() + self.wait_s
        while self.endpoint is None:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return None
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        return self.endpoint

    async def _forward(self, request: Request) -> Response:
        body = await request.body()
        endpoint = await self._target()
        if endpoint is None:
            return JSONResponse(
                {
                    "error": {
                        "code": "GR-OSB-NO-SANDBOX",
                        "message": f"{self.name}: no sandbox runs the server (waited {self.wait_s:g}s)",
                    }
                },
                status_code=503,
                headers={NO_SERVER: "no sandbox"},
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
            upstream.aiter_raw(), status_code=upstream.status_code, background=BackgroundTask(upstream.aclose)
        )
        response.raw_headers = [
            (k.encode("latin-1"), v.encode("latin-1"))
            for k, v in upstream.headers.multi_items()
            if k.lower() not in HOP | {NO_SERVER}
        ]
        if upstream.status_code == 502:  # execd's proxy: nothing listens on the server's port (yet)
            response.raw_headers.append((NO_SERVER.encode(), b"not listening"))
        return response
