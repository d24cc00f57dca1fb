"""One stable address in front of the replicas of a server instance (docs/scale-out.md).

An HTTP/1.1 reverse proxy served by uvicorn on the daemon's event loop (Starlette app, httpx
client). Each request goes to one replica:

* **sticky sessions**: a response of a replica that sets a cookie (Gym's servers keep their
  session in Starlette's ``<Class>___<instance>`` session cookie) teaches the router that this
  cookie value lives on that replica; a later request carrying it goes there while the replica
  runs. Clients (Gym's agents) send the value they were last given, so the newest value of each
  session is known. Up to :data:`MAX_SESSIONS` values are remembered (least recently used first
  out);
* otherwise the replica with the fewest requests in flight (ties: the least used so far), so
  requests spread over replicas and a slow replica gets fewer;
* a replica with no address (being placed or restarted) is skipped; when none has one, the
  request waits up to ``wait_s`` for one, then gets 503 ``{"error": {"code":
  "GR-PLACE-NO-REPLICA", ...}}``.

A replica whose node is lost (docs/scale-out.md "Node loss"): a request waiting for its answer
is cut as soon as the replica's address changes (the driver declared the loss and pointed the
address away), or fails by itself (the connection reset). The router then asks ``verdict`` whether
the replica's node was lost while the request was out; if so it answers 502 ``{"error": {"code":
"GR-ROLLOUT-NODE-LOST", "message", "node", "instance", "replica", "retried"}}`` naming the node,
the server instance and the replica, except for a ``POST`` to one of ``retry_paths`` (an agent's
``/run`` declared safe to repeat), which is sent once more to a replica that runs (waiting for
one as any request does). ``lost_answers`` and ``retried`` count both outcomes.

Requests are read whole (Gym's requests are JSON bodies); responses are streamed back as they
come (server-sent events included). Hop-by-hop headers are dropped both ways. Every forwarded
response names the replica that answered in the header ``x-gym-runtime-replica``
(``<instance>.<index>``, its member name), set here and never passed on from the replica, so the
head server can count rollouts per replica (:mod:`gym_runtime.rollouts.spread`); except in front of
an environment server (``keep_relayed_replica``): it relays a row to its agent's router and that
router's answer back, so the header it passes on names the *agent's* replica and is kept (the head
server takes it only when it names a replica of the row's agent). ``counts`` holds the
requests each replica answered, for ``/server_instances`` and the bench.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from http.cookies import CookieError, SimpleCookie
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gym_runtime.serving import LoopServer
from gym_runtime.sockets import listening_socket

MAX_SESSIONS = 100_000
NODE_LOST = "GR-ROLLOUT-NODE-LOST"
CUT_POLL_S = 0.25  # how often a request waiting for its answer checks that its replica is still there
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
REPLICA_HEADER = "x-gym-runtime-replica"  # set by the router only (gym_runtime/rollouts/spread.py reads it)


def _cookies(header: str) -> list[tuple[str, str]]:
    jar = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return []
    return [(k, m.value) for k, m in jar.items()]


class Router:
    """``Router(name, targets)``: ``targets()`` returns each replica's current ``(host, port)``
    or None, by replica index. ``await start(host)`` -> ``(host, port)``; ``await stop()``.

    ``verdict(replica, since)`` (optional): awaits whether replica ``replica``'s node was lost
    after ``since`` (``time.monotonic()``); returns ``{"node": "<address> (<id>)", ...}`` or None
    (not lost). ``retry_paths``: paths whose ``POST`` is sent once more after a node's loss."""

    def __init__(
        self,
        name: str,
        targets: Callable[[], list[tuple[str, int] | None]],
        wait_s: float = 30.0,
        verdict: Callable[[int, float], Awaitable[dict[str, Any] | None]] | None = None,
        retry_paths: frozenset[str] = frozenset(),
        keep_relayed_replica: bool = False,
    ) -> None:
        self.name = name
        self.keep_relayed_replica = keep_relayed_replica
        self.targets = targets
        self.wait_s = wait_s
        self.verdict = verdict
        self.retry_paths = retry_paths
        self.lost_answers = 0
        self.retried = 0
        self.sessions: OrderedDict[tuple[str, str], int] = OrderedDict()
        self.in_flight: dict[int, int] = {}
        self.counts: dict[int, int] = {}
        self.address: tuple[str, int] | None = None
        self._client = httpx.AsyncClient(
            trust_env=False, timeout=None, limits=httpx.Limits(max_connections=None, max_keepalive_connections=256)
        )
        routes = [
            Route("/{path:path}", self._forward, methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])
        ]
        self.app = Starlette(routes=routes)
        self._serving = LoopServer(self.app, server_header=False, date_header=False)

    async def start(self, host: str) -> tuple[str, int]:
        sock = listening_socket(host, reuse=True)
        sock.setblocking(False)
        await self._serving.serve([sock])
        self.address = sock.getsockname()[:2]
        return self.address

    async def stop(self) -> None:
        await self._serving.stop()
        await self._client.aclose()

    # ------------------------------------------------------------------ choice
    def _choose(self, cookie_header: str) -> tuple[int, tuple[str, int]] | None:
        live = {i: t for i, t in enumerate(self.targets()) if t is not None}
        if not live:
            return None
        for key in _cookies(cookie_header):
            i = self.sessions.get(key)
            if i is not None and i in live:
                self.sessions.move_to_end(key)
                return i, live[i]
        i = min(live, key=lambda r: (self.in_flight.get(r, 0), self.counts.get(r, 0)))
        return i, live[i]

    def _learn(self, replica: int, set_cookies: list[str]) -> None:
        for header in set_cookies:
            for key in _cookies(header):
                self.sessions[key] = replica
                self.sessions.move_to_end(key)
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)

    async def _pick(self, cookie_header: str) -> tuple[int, tuple[str, int]] | None:
        until = time.monotonic() + self.wait_s
        while (choice := self._choose(cookie_header)) is None and time.monotonic() < until:
            await asyncio.sleep(0.1)
        return choice

    # ------------------------------------------------------------------ forwarding
    async def _forward(self, request: Request) -> Response:
        body = await request.body()
        retry, retried = request.method == "POST" and request.url.path in self.retry_paths, False
        while True:
            choice = await self._pick(request.headers.get("cookie", ""))
            if choice is None:
                return JSONResponse(
                    {
                        "error": {
                            "code": "GR-PLACE-NO-REPLICA",
                            "message": f"{self.name}: no replica is running (waited {self.wait_s:g}s)",
                        }
                    },
                    status_code=503,
                )
            replica, (host, port) = choice
            headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP]
            url = httpx.URL(scheme="http", host=host, port=port, path=request.url.path)
            if request.url.query:
                url = url.copy_with(query=request.url.query.encode())
            self.in_flight[replica] = self.in_flight.get(replica, 0) + 1
            sent = time.monotonic()
            try:
                upstream = await self._send(
                    replica,
                    (host, port),
                    self._client.build_request(request.method, url, headers=headers, content=body),
                )
            except httpx.HTTPError as e:
                self.in_flight[replica] -= 1
                lost = await self.verdict(replica, sent) if self.verdict is not None else None
                if lost is None:
                    return JSONResponse(
                        {
                            "error": {
                                "code": "GR-PLACE-NO-REPLICA",
                                "message": f"{self.name}: replica {replica} at {host}:{port} did not answer: {e!r}",
                            }
                        },
                        status_code=502,
                    )
                if retry and not retried:
                    retried, self.retried = True, self.retried + 1
                    continue
                return self._node_lost(request, replica, lost, retried)
            break
        self._learn(replica, upstream.headers.get_list("set-cookie"))

        async def done() -> None:
            await upstream.aclose()
            self.in_flight[replica] -= 1
            self.counts[replica] = self.counts.get(replica, 0) + 1

        response = StreamingResponse(
            upstream.aiter_raw(), status_code=upstream.status_code, background=BackgroundTask(done)
        )
        relayed = self.keep_relayed_replica and REPLICA_HEADER in upstream.headers
        dropped = HOP if relayed else HOP | {REPLICA_HEADER}
        response.raw_headers = [
            (k.encode("latin-1"), v.encode("latin-1"))
            for k, v in upstream.headers.multi_items()
            if k.lower() not in dropped
        ]
        if not relayed:
            response.raw_headers.append((REPLICA_HEADER.encode(), f"{self.name}.{replica}".encode("latin-1")))
        return response

    # ------------------------------------------------------------------ node loss
    async def _send(self, replica: int, target: tuple[str, int], req: httpx.Request) -> httpx.Response:
        """The replica's answer (headers; the body streams later), or ``httpx.ReadError`` as soon
        as the replica's address is no longer ``target`` (its node was declared lost: an answer
        from a machine that is gone would never come)."""
        send = asyncio.ensure_future(self._client.send(req, stream=True))
        try:
            while not send.done():
                await asyncio.wait({send}, timeout=CUT_POLL_S)
                live = self.targets()
                if not send.done() and (replica >= len(live) or live[replica] != target):
                    raise httpx.ReadError(f"replica {replica} left {target[0]}:{target[1]}", request=req)
            return send.result()
        finally:
            if not send.done():
                send.cancel()
                send.add_done_callback(lambda t: t.cancelled() or t.exception())

    def _node_lost(self, request: Request, replica: int, lost: dict[str, Any], retried: bool) -> JSONResponse:
        self.lost_answers += 1
        node = lost.get("node") or "(unknown)"
        what = f"{request.method} {request.url.path}"
        message = (
            f"{self.name}: node {node} was lost while replica {replica} of server instance {self.name!r} "
            f"was answering {what}; it got no answer" + (" (also after one retry)" if retried else "")
        )
        if not retried and what == "POST /run":
            message += (
                "; declare placement.retry_run_on_node_loss: true on the agent if its /run is safe to "
                "send again (docs/scale-out.md)"
            )
        return JSONResponse(
            {
                "error": {
                    "code": NODE_LOST,
                    "message": message,
                    "node": node,
                    "instance": self.name,
                    "replica": replica,
                    "retried": retried,
                }
            },
            status_code=502,
        )
