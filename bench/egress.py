"""Sandbox data-path and egress figures. Loopback only. Prints a table and one JSON line.

    ./uvw run python bench/egress.py [--model-ms 1] [--rounds 3] [--requests 50] [--loop uvloop|asyncio] [--runs 30]

1. Policy-call latency: HTTP/1.1 keep-alive ``POST /v1/chat/completions`` to the real stub model
   (``python -m gym_runtime.stub_model``, its own process on host 127.0.0.1, as the daemon starts
   it), direct from the host vs from a sandboxed process through the policy-endpoint forward (same
   URL; the forward runs in this process's event loop: uvloop as in the daemon, or asyncio's with
   ``--loop asyncio``), at 1 and 100 concurrent connections (``--requests`` per connection, the
   first one of each connection not counted).
   Target: p50 overhead <= 5 % at 100 connections. With ``--model-ms MS`` > 0 also against a model
   that answers after a fixed MS (no CPU; its own process), where the forward's cost stands out.
   Direct and sandboxed runs alternate, ``--rounds`` times; figures are medians over the rounds.
   ``fwd cpu/req``: CPU time (user+system) of this process, i.e. of the forward, per request of the
   sandboxed run (the direct run's figure is the floor: this process idle); ``cpu share``: that CPU
   over the model's and the client's per direct request, the p50 overhead to expect when the host's
   CPU is the bottleneck (steadier than wall times on a shared machine). ``fds``: this process's
   open descriptors before the first and after the last sandboxed run.
2. Cost per new connection: a direct new connection + GET, vs the same through the forward, vs a
   proxy CONNECT (policy check, resolve, dial) + GET (plain HTTP in the tunnel: no TLS counted).
3. Sandbox start overhead per server: ``python -c pass`` spawned in the sandbox vs a plain
   subprocess, from spawn to exit; plus ``Sandbox.start`` itself. Target: < 50 ms per server.
The client side runs this same file with ``--client`` (stdlib only) inside a real uv venv; the
fixed-time model with ``--fixed-model``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAT = json.dumps(
    {
        "model": "stub-model",
        "messages": [{"role": "user", "content": "What is 17 + 25?"}],
        "max_tokens": 32,
        "temperature": 0,
    }
).encode()


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] * 1000 if xs else float("nan")


# ------------------------------------------------------------------ client (inside the sandbox, or direct)
async def _response(r: asyncio.StreamReader) -> bytes:
    head = await r.readuntil(b"\r\n\r\n")
    n = next((int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")), 0)
    body = await r.readexactly(n)
    assert head.startswith(b"HTTP/1.1 200"), head
    return body


async def _keepalive(host: str, port: int, n: int, lat: list[float]) -> None:
    r, w = await asyncio.open_connection(host, port)
    w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    req = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(CHAT)}\r\n\r\n"
    ).encode() + CHAT
    for i in range(n + 1):
        t = time.perf_counter()
        w.write(req)
        await _response(r)
        if i:  # the first request of a connection also waits for the connection's set-up
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
        await _response(r)
        lat.append(time.perf_counter() - t)
        w.close()


def client(spec: dict) -> dict:
    """Run one case; returns ``{"lat": [seconds], "cpu_s": this process's CPU time}``."""

    async def run() -> list[float]:
        lat: list[float] = []
        if spec["case"] == "keepalive":
            await asyncio.gather(
                *(_keepalive(spec["host"], spec["port"], spec["per"], lat) for _ in range(spec["conc"]))
            )
        else:
            await _newconn(spec["host"], spec["port"], spec["per"], spec.get("proxy"), lat)
        return lat

    lat = asyncio.run(run())
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"lat": lat, "cpu_s": ru.ru_utime + ru.ru_stime}


# ------------------------------------------------------------------ fixed-time model (its own process)
def fixed_model(port_file: str, delay_s: float) -> None:
    body = b'{"id":"x","object":"chat.completion","choices":[{"message":{"role":"assistant","content":"42"}}]}'
    resp = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                n = next(
                    (int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")), 0
                )
                await r.readexactly(n)
                await asyncio.sleep(delay_s)
                w.write(resp)
        except (asyncio.IncompleteReadError, ConnectionError):
            w.close()

    async def serve() -> None:
        srv = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        Path(port_file).write_text(str(srv.sockets[0].getsockname()[1]))
        await srv.serve_forever()

    asyncio.run(serve())


# ------------------------------------------------------------------ host side
async def _wait_port(port: int, deadline_s: float = 60.0) -> None:
    end = time.monotonic() + deadline_s
    while True:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            if time.monotonic() > end:
                raise
            await asyncio.sleep(0.1)


async def _start_stub(python: str) -> tuple[asyncio.subprocess.Process, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        python,
        "-m",
        "gym_runtime.stub_model",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8"},
        stdout=asyncio.subprocess.DEVNULL,
    )
    await _wait_port(port)
    return proc, port


async def _start_fixed(python: str, delay_ms: float, work: Path) -> tuple[asyncio.subprocess.Process, int]:
    pf = work / "fixed.port"
    proc = await asyncio.create_subprocess_exec(python, __file__, "--fixed-model", str(pf), "--model-ms", str(delay_ms))
    for _ in range(600):
        if pf.exists() and pf.read_text():
            return proc, int(pf.read_text())
        await asyncio.sleep(0.05)
    raise RuntimeError("fixed model did not start")


class Runner:
    """Runs one client case direct or in the sandbox; measures this process's CPU and fds around it."""

    def __init__(self, sb, python: Path, work: Path, models: dict[int, int]) -> None:
        import psutil

        self.sb, self.python, self.work, self.me = sb, python, work, psutil.Process()
        self.models = {port: psutil.Process(pid) for port, pid in models.items()}
        self.n = 0

    @staticmethod
    def _cpu(p) -> float:
        t = p.cpu_times()
        return t.user + t.system  # clock ticks (10 ms): thousands of requests per run keep this to a few us

    async def run(self, spec: dict, boxed: bool) -> dict:
        from sandbox import ProcessSpec

        self.n += 1
        path = self.work / f"spec{self.n}.json"
        path.write_text(json.dumps(spec))
        out = self.work / f"out{self.n}.json"
        model = self.models[spec["port"]]
        fds0, cpu0, mcpu0 = self.me.num_fds(), self._cpu(self.me), self._cpu(model)
        with open(out, "wb") as f:
            argv = [str(self.python), __file__, "--client", str(path)]
            if boxed:
                p = self.sb.spawn(
                    ProcessSpec(
                        "bench",
                        argv,
                        self.work,
                        {"PATH": "/usr/bin"},
                        read_only_paths=[self.python.parent.parent, Path(__file__).parent],
                        writable_paths=[self.work],
                        stdout_fd=f.fileno(),
                    )
                )
                await p.wait()
            else:
                p = await asyncio.create_subprocess_exec(*argv, stdout=f)
                await p.wait()
        cpu, mcpu = self._cpu(self.me) - cpu0, self._cpu(model) - mcpu0
        await asyncio.sleep(0.2)  # let closed connections finish on our side before counting fds
        res = json.loads(out.read_text())
        res["host_cpu_us_per_req"] = cpu / max(1, len(res["lat"])) * 1e6
        res["model_cpu_us_per_req"] = mcpu / max(1, len(res["lat"])) * 1e6
        res["fds"] = (fds0, self.me.num_fds())
        return res


async def _latency(runner: Runner, rounds: int, cases: dict[str, dict]) -> list[dict]:
    acc: dict[str, dict[str, list]] = {k: {"d": [], "b": []} for k in cases}
    for rnd in range(rounds):
        for key, spec in cases.items():
            order = (False, True) if rnd % 2 == 0 else (True, False)
            for boxed in order:
                s = spec["boxed"] if boxed else spec["direct"]
                acc[key]["b" if boxed else "d"].append(await runner.run(s, boxed))
    rows = []
    for key, a in acc.items():
        med = lambda side, f, a=a: statistics.median(f(r) for r in a[side])  # noqa: E731 - a one-line helper of this loop
        d50, b50 = med("d", lambda r: pct(r["lat"], 50)), med("b", lambda r: pct(r["lat"], 50))
        rows.append(
            {
                "case": key,
                "requests": len(a["b"][0]["lat"]),
                "direct_p50_ms": round(d50, 3),
                "sandbox_p50_ms": round(b50, 3),
                "direct_p99_ms": round(med("d", lambda r: pct(r["lat"], 99)), 3),
                "sandbox_p99_ms": round(med("b", lambda r: pct(r["lat"], 99)), 3),
                "p50_overhead_pct": round(100 * (b50 - d50) / d50, 1),
                "p50_overhead_ms": round(b50 - d50, 3),
                "p50_overhead_pct_rounds": [
                    round(100 * (pct(b["lat"], 50) - pct(d["lat"], 50)) / pct(d["lat"], 50), 1)
                    for d, b in zip(a["d"], a["b"], strict=True)
                ],
                "fwd_cpu_us_per_req": round(med("b", lambda r: r["host_cpu_us_per_req"]), 1),
                "idle_cpu_us_per_req": round(med("d", lambda r: r["host_cpu_us_per_req"]), 1),
                "model_cpu_us_per_req": round(med("d", lambda r: r["model_cpu_us_per_req"]), 1),
                "client_cpu_us_per_req_direct": round(med("d", lambda r: r["cpu_s"] / len(r["lat"]) * 1e6), 1),
                "client_cpu_us_per_req_sandbox": round(med("b", lambda r: r["cpu_s"] / len(r["lat"]) * 1e6), 1),
                "fds": [r["fds"] for r in a["b"]],
            }
        )
        r = rows[-1]  # the forward's CPU as a share of what a direct call costs the host (model + client)
        r["fwd_cpu_share_pct"] = round(
            100 * r["fwd_cpu_us_per_req"] / (r["model_cpu_us_per_req"] + r["client_cpu_us_per_req_direct"]), 1
        )
    return rows


async def _start_overhead(sb, python: Path, runs: int) -> tuple[list[float], list[float]]:
    from sandbox import ProcessSpec

    plain, boxed = [], []
    for _ in range(runs):
        t = time.perf_counter()
        p = await asyncio.create_subprocess_exec(str(python), "-c", "pass")
        await p.wait()
        plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        sp = sb.spawn(
            ProcessSpec(
                "start",
                [str(python), "-c", "pass"],
                python.parent,
                {"PATH": "/usr/bin"},
                read_only_paths=[python.parent.parent],
            )
        )
        await sp.wait()
        boxed.append(time.perf_counter() - t)
    return plain, boxed


async def main(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    import uv

    from sandbox import EgressPolicy, Sandbox

    load0 = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench-egress-"))
    python = tmp / "venv" / "bin" / "python"
    await (
        await asyncio.create_subprocess_exec(uv.find_uv_bin(), "venv", "-q", "--python", "3.11", str(tmp / "venv"))
    ).wait()
    stub, port = await _start_stub(sys.executable)
    models = [stub]
    endpoints = [f"http://127.0.0.1:{port}/v1"]
    if args.model_ms > 0:
        fixed, fport = await _start_fixed(sys.executable, args.model_ms, tmp)
        models.append(fixed)
        endpoints.append(f"http://127.0.0.1:{fport}/v1")
    env = {"NMP_RL_SANDBOX_ALLOW_INTERNET": "true", "NMP_RL_SANDBOX_PUBLIC_DNS_ALLOW": f"bench.example.net:{port}"}
    policy = EgressPolicy.from_environ(env, endpoints).with_trusted_addresses(["127.0.0.1"])
    t = time.perf_counter()
    sb = await Sandbox.start(policy, tmp / "sb", resolver=lambda h: ["127.0.0.1"])
    sb_start = time.perf_counter() - t
    try:
        work = tmp / "sb" / "w"
        work.mkdir(parents=True)
        runner = Runner(sb, python, work, {port: stub.pid, **({fport: fixed.pid} if args.model_ms > 0 else {})})
        ka = lambda p, c, n: {"case": "keepalive", "host": "127.0.0.1", "port": p, "conc": c, "per": n}  # noqa: E731
        cases = {
            "stub_c1": {"direct": ka(port, 1, args.requests * 10), "boxed": ka(port, 1, args.requests * 10)},
            "stub_c100": {"direct": ka(port, 100, args.requests), "boxed": ka(port, 100, args.requests)},
        }
        if args.model_ms > 0:
            cases[f"fixed{args.model_ms:g}ms_c100"] = {
                "direct": ka(fport, 100, args.requests),
                "boxed": ka(fport, 100, args.requests),
            }
        nc = {"case": "newconn", "host": "127.0.0.1", "port": port, "per": args.new}
        cases["newconn_forward"] = {"direct": nc, "boxed": nc}
        cases["newconn_connect"] = {"direct": nc, "boxed": {**nc, "host": "bench.example.net", "proxy": "env"}}
        rows = await _latency(runner, args.rounds, cases)
        plain_start, boxed_start = await _start_overhead(sb, python, args.runs)
    finally:
        await sb.close()
        for m in models:
            m.terminate()
            await m.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    load1 = os.getloadavg()
    start = {
        "sandbox_start_ms": round(sb_start * 1000, 1),
        "plain_spawn_median_ms": round(statistics.median(plain_start) * 1000, 1),
        "sandboxed_spawn_median_ms": round(statistics.median(boxed_start) * 1000, 1),
        "start_overhead_ms": round((statistics.median(boxed_start) - statistics.median(plain_start)) * 1000, 1),
    }
    loop_name = type(asyncio.get_running_loop()).__module__.split(".")[0]
    print(
        f"isolation: {sb.level.value}; loop: {loop_name}; {os.cpu_count()} cpus; load average "
        f"{load0[0]:.2f} -> {load1[0]:.2f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"medians of {args.rounds} rounds"
    )
    print(
        f"{'case':18} {'direct p50':>10} {'sbox p50':>10} {'direct p99':>10} {'sbox p99':>10} "
        f"{'p50 overhead':>20} {'fwd cpu/req':>11} {'cpu share':>9} {'fds before/after':>16}"
    )
    for r in rows:
        fds = f"{r['fds'][0][0]}/{r['fds'][-1][1]}"
        print(
            f"{r['case']:18} {r['direct_p50_ms']:>8.3f}ms {r['sandbox_p50_ms']:>8.3f}ms {r['direct_p99_ms']:>8.3f}ms "
            f"{r['sandbox_p99_ms']:>8.3f}ms {r['p50_overhead_pct']:>6.1f}% ({r['p50_overhead_ms']:+.3f} ms) "
            f"{r['fwd_cpu_us_per_req']:>8.1f} us {r['fwd_cpu_share_pct']:>8.1f}% {fds:>16}"
        )
    print(
        "fwd cpu/req: this process (the forward) per sandboxed request (idle floor: "
        + ", ".join(f"{r['idle_cpu_us_per_req']}" for r in rows)
        + " us); cpu share: that over the model's and "
        "the client's CPU per direct request (model "
        + ", ".join(f"{r['model_cpu_us_per_req']}" for r in rows)
        + " us; client "
        + ", ".join(f"{r['client_cpu_us_per_req_direct']}" for r in rows)
        + " us), the p50 "
        "overhead to expect when the host's CPU is the bottleneck"
    )
    print("newconn_forward = a new connection + GET through the forward; newconn_connect = proxy CONNECT + GET")
    print(
        f"start: Sandbox.start {start['sandbox_start_ms']} ms; python -c pass plain {start['plain_spawn_median_ms']} ms, "
        f"sandboxed {start['sandboxed_spawn_median_ms']} ms -> overhead {start['start_overhead_ms']} ms per server"
    )
    print(
        json.dumps(
            {
                "isolation": sb.level.value,
                "loop": loop_name,
                "load": [load0[0], load1[0]],
                "latency": rows,
                "start": start,
            }
        )
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--client")
    ap.add_argument("--fixed-model")
    ap.add_argument("--requests", type=int, default=50, help="keep-alive requests per connection (x10 at 1 connection)")
    ap.add_argument("--new", type=int, default=200, help="new connections per newconn case")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument(
        "--loop",
        choices=("asyncio", "uvloop"),
        default="uvloop",
        help="event loop of the forwards (the daemon's is uvloop)",
    )
    ap.add_argument("--model-ms", type=float, default=1.0, help="also a fixed-time model answering after MS (0: off)")
    a = ap.parse_args()
    if a.client:
        s = json.loads(Path(a.client).read_text())
        if s.get("proxy"):
            s["proxy"] = os.environ["HTTP_PROXY"].split("://", 1)[1]
        print(json.dumps(client(s)))
    elif a.fixed_model:
        fixed_model(a.fixed_model, a.model_ms / 1000)
    elif a.loop == "uvloop":
        import uvloop

        uvloop.run(main(a))
    else:
        asyncio.run(main(a))
