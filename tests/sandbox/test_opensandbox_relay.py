"""The daemon-side pieces of the opensandbox backend, on loopback: the relay in front of a
server's sandbox endpoint (``host:port/proxy/N``) and the forwarder that runs beside each server
(a real subprocess of this interpreter)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from sandbox.opensandbox.groups import FORWARDER
from sandbox.opensandbox.relay import Relay


async def _serve(app: Starlette) -> tuple[uvicorn.Server, asyncio.Task, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    return server, task, sock.getsockname()[1]


def _endpoint_app() -> Starlette:
    """What execd's ``/proxy/{port}`` answers with: the path after the prefix, the body, a stream."""

    async def echo(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "path": request.url.path,
                "query": request.url.query,
                "body": (await request.body()).decode(),
                "method": request.method,
            },
            headers={"set-cookie": "s=1"},
        )

    async def stream(request: Request) -> StreamingResponse:
        async def gen():
            for i in range(3):
                yield f"data: {i}\n\n".encode()

        return StreamingResponse(gen(), media_type="text/event-stream")

    return Starlette(
        routes=[Route("/proxy/9000/stream", stream), Route("/proxy/9000/{rest:path}", echo, methods=["GET", "POST"])]
    )


def test_relay_forwards_under_the_endpoint_prefix_and_waits_for_a_sandbox() -> None:
    async def main() -> None:
        server, task, port = await _serve(_endpoint_app())
        relay = Relay("arithmetic", wait_s=0.3)
        host, rport = await relay.start("127.0.0.1")
        try:
            async with httpx.AsyncClient(base_url=f"http://{host}:{rport}", trust_env=False) as c:
                r = await c.get("/verify")
                assert r.status_code == 503 and r.json()["error"]["code"] == "GR-OSB-NO-SANDBOX"
                relay.point(f"127.0.0.1:{port}/proxy/9000")
                r = await c.post("/verify?x=1", json={"a": 1})
                assert r.status_code == 200 and r.headers["set-cookie"] == "s=1"
                assert r.json() == {"path": "/proxy/9000/verify", "query": "x=1", "body": '{"a":1}', "method": "POST"}
                assert (await c.get("/stream")).text == "data: 0\n\ndata: 1\n\ndata: 2\n\n"
                waiting = asyncio.ensure_future(c.get("/later"))  # a restart: the request waits for the new sandbox
                relay.point(None)
                await asyncio.sleep(0.05)
                relay.point(f"127.0.0.1:{port}/proxy/9000")
                assert (await waiting).json()["path"] == "/proxy/9000/later"
        finally:
            await relay.stop()
            server.should_exit = True
            await task

    asyncio.run(main())


def test_forwarder_splices_each_port_and_names_one_it_cannot_bind() -> None:
    async def main() -> None:
        async def upper(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write((await reader.readline()).upper())
            await writer.drain()
            writer.close()

        target = await asyncio.start_server(upper, "127.0.0.1", 0)
        tport = target.sockets[0].getsockname()[1]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            listen = s.getsockname()[1]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            "-c",
            FORWARDER,
            json.dumps([[listen, "127.0.0.1", tport]]),
            stdout=subprocess.PIPE,
        )
        try:
            assert (await proc.stdout.readline()).decode().strip() == "forwarding 1 port(s)"
            reader, writer = await asyncio.open_connection("127.0.0.1", listen)
            writer.write(b"hello\n")
            await writer.drain()
            assert await reader.readline() == b"HELLO\n"
            writer.close()
        finally:
            proc.kill()
            await proc.wait()
            target.close()
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = taken.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-I", "-S", "-c", FORWARDER, json.dumps([[busy, "127.0.0.1", tport]])],
            capture_output=True,
            text=True,
            timeout=30,
        )
        taken.close()
        assert r.returncode == 1 and f"cannot listen on 127.0.0.1:{busy}" in r.stdout

    asyncio.run(main())


def test_answers_given_in_the_servers_stead_are_not_readiness() -> None:
    """The relay's own 503 and execd's 502 (nothing listens yet) carry the no-server header, which
    the readiness probe does not take for the server's answer; the server's own answer passes."""
    from gym_runtime.supervise.readiness import probe

    async def not_listening(request: Request) -> JSONResponse:
        return JSONResponse({"code": "BAD_GATEWAY", "message": "127.0.0.1:20004: Connection refused"}, status_code=502)

    async def main() -> None:
        server, task, port = await _serve(
            Starlette(
                routes=[
                    Route("/proxy/1/{rest:path}", not_listening),
                    Route("/proxy/2/{rest:path}", lambda r: JSONResponse({})),
                ]
            )
        )
        relay = Relay("arithmetic", wait_s=0.1)
        host, rport = await relay.start("127.0.0.1")
        try:
            async with httpx.AsyncClient(trust_env=False) as c:
                url = f"http://{host}:{rport}/"
                assert await probe(c, url) == "no answer from the server (no sandbox)"
                relay.point(f"127.0.0.1:{port}/proxy/1")
                assert await probe(c, url) == "no answer from the server (not listening)"
                relay.point(f"127.0.0.1:{port}/proxy/2")
                assert await probe(c, url) is None
        finally:
            await relay.stop()
            server.should_exit = True
            await task

    asyncio.run(main())


STOPPING = """
import asyncio, json, sys, time
import httpx, uvicorn
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route
from sandbox.opensandbox.relay import Relay

async def endless(request):
    async def gen():
        yield b"data: 0\\n\\n"
        await asyncio.sleep(3600)
    return StreamingResponse(gen(), media_type="text/event-stream")

async def main():
    server = uvicorn.Server(uvicorn.Config(Starlette(routes=[Route("/proxy/9/{rest:path}", endless)]),
                                           port=0, log_level="warning", lifespan="off"))
    serving = asyncio.ensure_future(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    waiting, streaming = Relay("waiting", wait_s=30.0), Relay("streaming")
    w_host, w_port = await waiting.start("127.0.0.1")
    s_host, s_port = await streaming.start("127.0.0.1")
    streaming.point(f"127.0.0.1:{port}/proxy/9")
    client = httpx.AsyncClient(trust_env=False, timeout=60)
    pending = asyncio.ensure_future(client.get(f"http://{w_host}:{w_port}/"))
    stream = await client.send(client.build_request("GET", f"http://{s_host}:{s_port}/events"), stream=True)
    chunks = stream.aiter_raw()
    first = await chunks.__anext__()
    await asyncio.sleep(0.2)
    t0 = time.monotonic()
    await waiting.stop()
    answer = await pending
    await streaming.stop()
    took = time.monotonic() - t0
    rest = b"".join([chunk async for chunk in chunks])
    abandoned = Relay("abandoned", wait_s=30.0)  # never stopped: the loop's end cancels its request
    a_host, a_port = await abandoned.start("127.0.0.1")
    left = asyncio.ensure_future(client.get(f"http://{a_host}:{a_port}/"))
    await asyncio.sleep(0.2)
    server.should_exit = True
    await serving
    print(json.dumps({"status": answer.status_code, "body": answer.json(), "header": answer.headers.get("x-gym-runtime-no-server"),
                      "first": first.decode(), "rest": rest.decode(), "took": took}), flush=True)

asyncio.run(main())
"""


def test_a_stopping_relay_answers_what_waits_and_prints_no_traceback() -> None:
    """A relay stopped while a request waits for a sandbox answers it 503 at once, ends a stream it
    relays, and nothing it did prints a traceback, not even a request still open when the loop ends
    (uvicorn's "Exception in ASGI application" with ``CancelledError`` before)."""
    r = subprocess.run([sys.executable, "-c", STOPPING], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["status"] == 503 and out["header"] == "relay stopping", out
    assert out["body"]["error"] == {"code": "GR-OSB-NO-SANDBOX", "message": "waiting: the relay is stopping"}
    assert out["first"] == "data: 0\n\n" and out["took"] < 10, out
    assert out["rest"] == "", out  # the relayed stream ended cleanly when the relay stopped
    for noise in (
        "Traceback",
        "Exception in ASGI application",
        "CancelledError",
        "Task was destroyed",
        "ASGI callable",
    ):
        assert noise not in r.stderr, r.stderr[-3000:]
