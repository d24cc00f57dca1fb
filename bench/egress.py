"""Egress and sandbox overhead figures. Loopback only. Prints a table and one JSON line.

    ./uvw run python bench/egress.py [--requests 300] [--runs 30] [--model-ms 0]

1. Model-call latency (HTTP/1.1 keep-alive POSTs to a tiny asyncio "model" on host 127.0.0.1):
   direct from the host vs from inside the sandbox through the policy-endpoint TCP forward
   (same URL), at 1 and 100 concurrent connections. Target: p50 overhead <= 5 %.
2. Proxy cost per new connection: CONNECT through the allowlisting proxy + one GET, vs a direct
   new connection + GET (plain HTTP in the tunnel, so TLS cost is not counted).
3. Sandbox start overhead per server: ``python -c pass`` spawned in the sandbox vs a plain
   subprocess, from spawn to exit; plus ``Sandbox.start`` itself. Target: < 50 ms per server.
The client side runs this same file with ``--client`` (stdlib only) inside a real uv venv.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

BODY = b'{"id":"x","object":"chat.completion","choices":[{"message":{"role":"assistant","content":"hi"}}]}'


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] * 1000


# ------------------------------------------------------------------ client (runs inside the sandbox)
async def _keepalive(host: str, port: int, n: int, lat: list[float]) -> None:
    r, w = await asyncio.open_connection(host, port)
    req = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
           f"Content-Length: 2\r\n\r\n{{}}").encode()
    for _ in range(n):
        t = time.perf_counter()
        w.write(req)
        await r.readuntil(b"\r\n\r\n")
        await r.readexactly(len(BODY))
        lat.append(time.perf_counter() - t)
    w.close()


async def _newconn(host: str, port: int, n: int, via_proxy: str | None, lat: list[float]) -> None:
    for _ in range(n):
        t = time.perf_counter()
        if via_proxy:
            ph, pp = via_proxy.rsplit(":", 1)
            r, w = await asyncio.open_connection(ph, int(pp))
            w.write(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
            head = await r.readuntil(b"\r\n\r\n")
            assert b" 200 " in head, head
        else:
            r, w = await asyncio.open_connection(host, port)
        w.write(f"GET / HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n".encode())
        await r.readuntil(b"\r\n\r\n")
        await r.readexactly(len(BODY))
        lat.append(time.perf_counter() - t)
        w.close()


def client(spec: dict) -> dict:
    async def run() -> dict:
        out = {}
        for conc in (1, 100):
            lat: list[float] = []
            per = max(10, spec["requests"] // conc) if conc > 1 else spec["requests"]
            await asyncio.gather(*(_keepalive(spec["host"], spec["port"], per, lat) for _ in range(conc)))
            out[f"keepalive_c{conc}"] = lat
        lat = []
        await _newconn(spec["name"], spec["port"], spec["new"], spec.get("proxy"), lat)
        out["newconn"] = lat
        return out

    return asyncio.run(run())


# ------------------------------------------------------------------ host side
async def _model_server(delay_s: float = 0.0) -> tuple[asyncio.AbstractServer, int]:
    resp = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                n = next((int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")), 0)
                await r.readexactly(n)
                if delay_s:
                    await asyncio.sleep(delay_s)
                w.write(resp)
        except (asyncio.IncompleteReadError, ConnectionError):
            w.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    return srv, srv.sockets[0].getsockname()[1]


async def _run_client(sb, python: Path, spec: dict, work: Path) -> dict:
    from sandbox import ProcessSpec

    (work / "spec.json").write_text(json.dumps(spec))
    out = work / "client.out"
    with open(out, "wb") as f:
        p = sb.spawn(ProcessSpec("bench", [str(python), __file__, "--client", str(work / "spec.json")], work,
                                 {"PATH": "/usr/bin"}, read_only_paths=[python.parent.parent, Path(__file__).parent],
                                 writable_paths=[work], stdout_fd=f.fileno()))
    await p.wait()
    return json.loads(out.read_text())


async def _direct_client(python: Path, spec: dict, work: Path) -> dict:
    (work / "spec_d.json").write_text(json.dumps(spec))
    proc = await asyncio.create_subprocess_exec(str(python), __file__, "--client", str(work / "spec_d.json"),
                                                stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    return json.loads(out)


async def _start_overhead(sb, python: Path, runs: int) -> tuple[list[float], list[float]]:
    from sandbox import ProcessSpec

    plain, boxed = [], []
    for _ in range(runs):
        t = time.perf_counter()
        p = await asyncio.create_subprocess_exec(str(python), "-c", "pass")
        await p.wait()
        plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        sp = sb.spawn(ProcessSpec("start", [str(python), "-c", "pass"], python.parent, {"PATH": "/usr/bin"},
                                  read_only_paths=[python.parent.parent]))
        await sp.wait()
        boxed.append(time.perf_counter() - t)
    return plain, boxed


async def main(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import uv

    from sandbox import EgressPolicy, Sandbox

    tmp = Path(tempfile.mkdtemp(prefix="bench-egress-"))
    python = tmp / "venv" / "bin" / "python"
    await (await asyncio.create_subprocess_exec(uv.find_uv_bin(), "venv", "-q", "--python", "3.11", str(tmp / "venv"))).wait()
    srv, port = await _model_server(args.model_ms / 1000)
    env = {"NMP_RL_SANDBOX_ALLOW_INTERNET": "true", "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW": f"bench.example.net:{port}"}
    policy = EgressPolicy.from_environ(env, [f"http://127.0.0.1:{port}/v1"]).with_trusted_addresses(["127.0.0.1"])
    t = time.perf_counter()
    sb = await Sandbox.start(policy, tmp / "sb", resolver=lambda h: ["127.0.0.1"])
    sb_start = time.perf_counter() - t
    try:
        work = tmp / "sb" / "w"
        work.mkdir(parents=True)
        spec = {"host": "127.0.0.1", "port": port, "name": "bench.example.net", "requests": args.requests, "new": args.new}
        direct = await _direct_client(python, {**spec, "name": "127.0.0.1"}, work)
        # inside: keep-alive calls at the original URL (the forward); new connections via its proxy listener
        boxed = await _run_client(sb, python, {**spec, "proxy": True}, work)
        plain_start, boxed_start = await _start_overhead(sb, python, args.runs)
    finally:
        await sb.close()
        srv.close()
    rows = []
    for key in ("keepalive_c1", "keepalive_c100", "newconn"):
        d50, b50 = pct(direct[key], 50), pct(boxed[key], 50)
        rows.append({"case": key, "direct_p50_ms": round(d50, 3), "sandbox_p50_ms": round(b50, 3),
                     "direct_p90_ms": round(pct(direct[key], 90), 3), "sandbox_p90_ms": round(pct(boxed[key], 90), 3),
                     "p50_overhead_pct": round(100 * (b50 - d50) / d50, 1), "p50_overhead_ms": round(b50 - d50, 3)})
    start = {"sandbox_start_ms": round(sb_start * 1000, 1),
             "plain_spawn_median_ms": round(statistics.median(plain_start) * 1000, 1),
             "sandboxed_spawn_median_ms": round(statistics.median(boxed_start) * 1000, 1),
             "start_overhead_ms": round((statistics.median(boxed_start) - statistics.median(plain_start)) * 1000, 1)}
    print(f"isolation: {sb.level.value}; model service time {args.model_ms} ms")
    print(f"{'case':16} {'direct p50':>11} {'sandbox p50':>12} {'direct p90':>11} {'sandbox p90':>12} {'p50 overhead':>13}")
    for r in rows:
        print(f"{r['case']:16} {r['direct_p50_ms']:>9.3f}ms {r['sandbox_p50_ms']:>10.3f}ms {r['direct_p90_ms']:>9.3f}ms "
              f"{r['sandbox_p90_ms']:>10.3f}ms {r['p50_overhead_pct']:>11.1f}% ({r['p50_overhead_ms']:+.3f} ms)")
    print("newconn = direct new TCP connection + GET vs proxy CONNECT (policy check, resolve, dial) + GET")
    print(f"start: Sandbox.start {start['sandbox_start_ms']} ms; python -c pass plain {start['plain_spawn_median_ms']} ms, "
          f"sandboxed {start['sandboxed_spawn_median_ms']} ms -> overhead {start['start_overhead_ms']} ms per server")
    print(json.dumps({"isolation": sb.level.value, "latency": rows, "start": start}))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--client")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--new", type=int, default=100)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--model-ms", type=float, default=0.0, help="artificial service time of the model per call")
    a = ap.parse_args()
    if a.client:
        s = json.loads(Path(a.client).read_text())
        if s.get("proxy"):
            s["proxy"] = os.environ["HTTP_PROXY"].split("://", 1)[1]
        print(json.dumps(client(s)))
    else:
        asyncio.run(main(a))
