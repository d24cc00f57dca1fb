"""A loopback HTTP proxy in front of the test OpenSandbox server's lifecycle API, seeing what the
daemon asks of it: :class:`LifecycleProxy` counts the sandbox creates in flight (``POST
/v1/sandboxes``: the most at once, ``max_in_flight``), answers the next ``fail_creates`` creates
503 itself without passing them on (a busy server or gateway), and holds the server's answer to the
next ``slow_creates`` creates for ``slow_s`` seconds after the server made the sandbox (a create that
times out on the client's side but happened), and holds the next ``late_creates`` creates for
``slow_s`` seconds before passing them on (a create the client gave up on that the server makes
later). Everything else passes through unchanged.

Runs uvicorn with a Starlette app in a thread of its own (:meth:`start`, :meth:`stop`);
``domain`` (``127.0.0.1:PORT``) is what ``OPENSANDBOX_DOMAIN`` takes.
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.helpers.opensandbox.server import free_port

HOP = {"host", "content-length", "transfer-encoding", "connection"}


class LifecycleProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream  # http://127.0.0.1:PORT of the real server
        self.port = free_port()
        self.domain = f"127.0.0.1:{self.port}"
        self.fail_creates = 0
        self.slow_creates = 0
        self.late_creates = 0
        self.slow_s = 0.0
        self.in_flight = 0
        self.max_in_flight = 0
        self.creates: list[tuple[float, int]] = []  # (monotonic time answered, status) of each create
        self.renewals: list[str] = []  # sandbox ids whose expiry was renewed, in order
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    async def _handle(self, request: Request) -> Response:
        path = request.url.path
        create = request.method == "POST" and path.rstrip("/") == "/v1/sandboxes"
        if request.method == "POST" and path.endswith("/renew-expiration"):
            with self._lock:
                self.renewals.append(path.split("/")[3])
        if create:
            with self._lock:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                fail = self.fail_creates > 0
                self.fail_creates -= 1 if fail else 0
                slow = not fail and self.slow_creates > 0
                self.slow_creates -= 1 if slow else 0
                late = not fail and not slow and self.late_creates > 0
                self.late_creates -= 1 if late else 0
        try:
            if create and fail:
                await asyncio.sleep(0.05)
                answer = Response(b'{"code":"GATEWAY::BUSY","message":"busy"}', 503, media_type="application/json")
            else:
                body = await request.body()
                if create and late:
                    await asyncio.sleep(self.slow_s)
                headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
                async with httpx.AsyncClient(timeout=300) as client:
                    r = await client.request(
                        request.method,
                        self.upstream + path,
                        params=list(request.query_params.multi_items()),
                        content=body,
                        headers=headers,
                    )
                if create and slow:
                    await asyncio.sleep(self.slow_s)
                answer = Response(
                    r.content, r.status_code, headers={k: v for k, v in r.headers.items() if k.lower() not in HOP}
                )
            if create:
                with self._lock:
                    self.creates.append((time.monotonic(), answer.status_code))
            return answer
        finally:
            if create:
                with self._lock:
                    self.in_flight -= 1

    def start(self) -> LifecycleProxy:
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["GET", "POST", "DELETE", "PATCH", "PUT"])])
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the lifecycle proxy did not start in 30 s")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(30)
