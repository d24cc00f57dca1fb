"""The HTTP router in front of several replicas: spread, session stickiness, streaming, waiting
for a replica (gym_runtime/placement/router.py). Replicas are real HTTP servers on loopback."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from gym_runtime.placement.router import Router


def replica(index: int) -> ThreadingHTTPServer:
    """A server that names itself, sets a session cookie on /seed_session and echoes the
    cookie it got elsewhere (like a Gym resources server's session middleware)."""

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, obj: dict, cookie: str | None = None) -> None:
            body = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            if cookie:
                self.send_header("set-cookie", cookie)
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            data = self.rfile.read(int(self.headers.get("content-length", 0)))
            if self.path == "/seed_session":
                return self._send({"replica": index}, f"Res___acme=s{index}-{json.loads(data)['row']}; Path=/")
            self._send({"replica": index, "cookie": self.headers.get("cookie"), "echo": json.loads(data)})

        def do_GET(self) -> None:
            self._send({"replica": index, "path": self.path})

        def log_message(self, *a) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture
def replicas():
    servers = [replica(0), replica(1)]
    yield servers
    for s in servers:
        s.shutdown()
        s.server_close()


def test_requests_spread_and_sessions_stick_to_the_replica_that_set_them(replicas) -> None:
    targets = [s.server_address[:2] for s in replicas]

    async def scenario() -> None:
        router = Router("acme_math", lambda: targets)
        host, port = await router.start("127.0.0.1")
        try:
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}", trust_env=False) as c:
                seen = [(await c.get("/", params={"i": i})).json() for i in range(6)]
                assert {s["replica"] for s in seen} == {0, 1} and seen[0]["path"] == "/?i=0"
                rows = []
                for row in range(8):  # a session each, as an agent's /run does
                    c.cookies.clear()  # an agent's /run starts with the cookies of its own request: none
                    r = await c.post("/seed_session", json={"row": row})
                    cookie = r.headers["set-cookie"].split(";")[0]
                    for _ in range(3):
                        again = await c.post("/verify", json={"row": row}, headers={"cookie": cookie})
                        assert again.json()["replica"] == r.json()["replica"]
                        assert again.json()["cookie"] == cookie and again.json()["echo"] == {"row": row}
                    rows.append(r.json()["replica"])
                assert set(rows) == {0, 1}
            assert sum(router.counts.values()) == 6 + 8 * 4 and set(router.counts) == {0, 1}
        finally:
            await router.stop()

    asyncio.run(scenario())


def test_a_replica_without_an_address_is_skipped_and_none_means_a_wait_then_503(replicas) -> None:
    targets: list = [None, replicas[1].server_address[:2]]

    async def scenario() -> None:
        router = Router("acme_math", lambda: targets, wait_s=0.5)
        host, port = await router.start("127.0.0.1")
        try:
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}", trust_env=False) as c:
                assert {(await c.get("/")).json()["replica"] for _ in range(4)} == {1}
                targets[1] = None
                r = await c.get("/")
                assert r.status_code == 503 and r.json()["error"]["code"] == "GR-PLACE-NO-REPLICA"
                targets[0] = replicas[0].server_address[:2]
                assert (await c.get("/")).json()["replica"] == 0
        finally:
            await router.stop()

    asyncio.run(scenario())


@pytest.fixture
def silent():
    """A replica whose node is gone: it takes the connection and never answers."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield s.getsockname()[:2]
    s.close()


def _lost_router(targets: list, retry_paths: frozenset = frozenset()) -> tuple[Router, list]:
    asked: list = []

    async def verdict(replica: int, since: float):
        asked.append(replica)
        return {"node": "127.0.0.1 (deadbeef)", "node_id": "deadbeef" * 7} if replica == 0 else None

    return Router("acme_agent", lambda: targets, wait_s=5, verdict=verdict, retry_paths=retry_paths), asked


def test_a_request_on_a_lost_node_is_cut_and_answered_with_the_node_named(replicas, silent) -> None:
    targets: list = [silent, None]

    async def scenario() -> None:
        router, asked = _lost_router(targets)
        host, port = await router.start("127.0.0.1")
        try:
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}", trust_env=False, timeout=30) as c:
                out = asyncio.create_task(c.post("/run", json={"row": 1}))
                await asyncio.sleep(0.5)
                assert not out.done()  # the silent replica holds it
                targets[0] = None  # the driver declared its node lost and pointed its address away
                r = await asyncio.wait_for(out, 5)
            err = r.json()["error"]
            assert r.status_code == 502 and err["code"] == "GR-ROLLOUT-NODE-LOST" and asked == [0]
            assert (err["node"], err["instance"], err["replica"], err["retried"]) == (
                "127.0.0.1 (deadbeef)",
                "acme_agent",
                0,
                False,
            )
            assert (
                "node 127.0.0.1 (deadbeef) was lost while replica 0 of server instance 'acme_agent'" in err["message"]
            )
            assert "retry_run_on_node_loss" in err["message"]  # how to declare the retry
            assert router.lost_answers == 1 and router.retried == 0
        finally:
            await router.stop()

    asyncio.run(scenario())


def test_a_run_declared_safe_is_sent_once_more_to_a_replica_that_runs(replicas, silent) -> None:
    targets: list = [silent, None]

    async def scenario() -> None:
        router, asked = _lost_router(targets, frozenset({"/run"}))
        host, port = await router.start("127.0.0.1")
        try:
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}", trust_env=False, timeout=30) as c:
                out = asyncio.create_task(c.post("/run", json={"row": 7}))
                await asyncio.sleep(0.5)
                targets[:] = [None, replicas[1].server_address[:2]]  # lost; the other replica runs
                r = await asyncio.wait_for(out, 10)
            assert r.status_code == 200 and r.json()["replica"] == 1 and r.json()["echo"] == {"row": 7}
            assert asked == [0] and router.retried == 1 and router.lost_answers == 0
        finally:
            await router.stop()

    asyncio.run(scenario())


def test_a_failure_that_is_no_node_loss_keeps_its_own_error() -> None:
    targets: list = [None, ("127.0.0.1", 1)]  # replica 1: nothing listens there, and its node is not lost

    async def scenario() -> tuple[httpx.Response, list]:
        router, asked = _lost_router(targets, frozenset({"/run"}))
        host, port = await router.start("127.0.0.1")
        try:
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}", trust_env=False, timeout=30) as c:
                return await c.post("/run", json={}), asked
        finally:
            await router.stop()

    r, asked = asyncio.run(scenario())
    assert asked == [1] and r.status_code == 502  # not sent again: only a node's loss is
    assert (
        r.json()["error"]["code"] == "GR-PLACE-NO-REPLICA"
        and "replica 1 at 127.0.0.1:1" in r.json()["error"]["message"]
    )


def test_only_an_environment_servers_router_keeps_the_replica_header_it_relays() -> None:
    """A replica's own claim to be a replica is never passed on, except through an environment
    server's router: the environment server relays its agent's answer, whose header the agent's
    router set, and the head server counts rows per agent replica from it."""

    class H(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            claim = self.headers.get("x-claim")
            self.send_response(200)
            if claim:
                self.send_header("x-gym-runtime-replica", claim)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()

    async def header(keep: bool, claim: str | None) -> list[str]:
        router = Router("acme_env", lambda: [srv.server_address[:2]], keep_relayed_replica=keep)
        host, port = await router.start("127.0.0.1")
        try:
            async with httpx.AsyncClient(trust_env=False) as c:
                r = await c.post(f"http://{host}:{port}/run", json={}, headers={"x-claim": claim} if claim else {})
                return r.headers.get_list("x-gym-runtime-replica")
        finally:
            await router.stop()

    try:
        assert asyncio.run(header(False, "acme_agent.1")) == ["acme_env.0"]  # a replica's claim: dropped
        assert asyncio.run(header(True, "acme_agent.1")) == ["acme_agent.1"]  # relayed from the agent's router
        assert asyncio.run(header(True, None)) == ["acme_env.0"]
    finally:
        srv.shutdown()
        srv.server_close()
