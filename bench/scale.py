"""Scale-out figures (docs/scale-out.md): rollouts/s with 1, 2 and 4 replicas, and node-loss recovery.

    ./uvw run python bench/scale.py [--rows 120] [--replicas 1 2 4] [--agent-replicas 1 2] [--skip ...]

A real Ray cluster on this machine (a head and two workers, every node on 127.0.0.1:
tests/helpers/ray_cluster.py) and ``gym-runtime up --placement ray`` as a subprocess, as a
training job would run it. The environment: a resources server whose ``POST /verify`` holds
50 ms and serves one request at a time per replica (latency-bound, so two cores can show
scaling), and a threaded agent whose ``/run`` calls ``/verify`` through the resources server's
stable address (the router when there are several replicas). Rows go through the head server's
``POST /rollouts/run``.

1. rollouts/s with N replicas of the resources server (goal: >= 0.8 x N times the 1-replica
   figure), and the node of each replica;
2. rollouts/s with N replicas of the agent (one per worker; each serves one ``/run`` at a time
   and holds it 50 or 200 ms), rows spread by the agent's router, with the per-replica counts and the
   rollouts/s that ``POST /rollouts/run`` itself reports (docs/rollouts.md, "Rollouts at scale");
3. node loss: the resources server (one replica) on a worker whose raylet is killed; the time
   until the loss is seen (its replica's exit; goal < 5 s) and until its stable address answers
   again from the other worker (goal < 10 s), with the daemon's lines since the kill (where the
   time went: the placement line gives the seconds of each step);
4. node loss of the bundled example (``--loss-runs N``): seven instances, the worker hosting most
   of its replicas lost, N runs on a quiet machine and N with a CPU burner beside the cluster (one
   ``while 1: pass`` process per core at the cluster's own priority, from before the loss until the rows
   after it are scored; ``--burner`` chooses): the seconds until every address the ready line
   lists answers again on a live node (goal < 10 s) and whether every row run after the loss is
   scored; median and range, with the daemon's lines of the slowest run.

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.daemon import kill_tree, read_ready_line, up_process, write_fixture_package  # noqa: E402
from tests.helpers.ray_cluster import LocalRayCluster  # noqa: E402

PEERS = r'''
import json, os
def peers():
    """instance -> {key: value} of the 6-space keys of its block in NEMO_GYM_CONFIG_DICT (stdlib only)."""
    out, cur = {}, None
    for line in os.environ["NEMO_GYM_CONFIG_DICT"].splitlines():
        if not line.startswith(" "):
            cur = out.setdefault(line.rstrip(":"), {})
        elif cur is not None and line.startswith("      ") and not line.startswith("       ") and ": " in line:
            k, v = line.strip().split(": ", 1)
            cur[k] = v.strip("'\"")
    return out
'''

RESOURCES = (
    PEERS
    + r"""
import time
from http.server import HTTPServer, BaseHTTPRequestHandler
me = peers()[os.environ["NEMO_GYM_CONFIG_PATH"]]
class H(BaseHTTPRequestHandler):  # HTTP/1.0: one request per connection, so no idle keep-alive blocks it
    def _send(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200); self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        self._send({"status": "ok"})
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.path == "/verify":
            time.sleep(0.05)  # the verifier's work; one request at a time (HTTPServer is not threaded)
        self._send({"reward": 1.0, "pid": os.getpid()})
    def log_message(self, *a):
        pass
class S(HTTPServer):
    request_queue_size = 256  # the rows in flight wait in the backlog, not in SYN retries (default 5)
S((me["host"], int(me["port"])), H).serve_forever()
"""
)

AGENT = (
    PEERS
    + r"""
import http.client
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
cfg = peers()
me, res = cfg[os.environ["NEMO_GYM_CONFIG_PATH"]], cfg["acme_math"]
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def _send(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200); self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        self._send({"status": "ok"})
    def do_POST(self):
        row = self.rfile.read(int(self.headers.get("content-length", 0)))
        c = http.client.HTTPConnection(res["host"], int(res["port"]), timeout=60)
        c.request("POST", "/verify", body=row, headers={"content-type": "application/json"})
        out = json.loads(c.getresponse().read()); c.close()
        self._send(out)
    def log_message(self, *a):
        pass
ThreadingHTTPServer((me["host"], int(me["port"])), H).serve_forever()
"""
)

SLOW_AGENT = (
    PEERS
    + r"""
import time
from http.server import HTTPServer, BaseHTTPRequestHandler
me = peers()[os.environ["NEMO_GYM_CONFIG_PATH"]]
HOLD_S = 0.05
class H(BaseHTTPRequestHandler):  # HTTP/1.0 and not threaded: one /run at a time, HOLD_S each
    def _send(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200); self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        self._send({"status": "ok"})
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        time.sleep(HOLD_S)
        self._send({"reward": 1.0})
    def log_message(self, *a):
        pass
class S(HTTPServer):
    request_queue_size = 256  # the rows in flight wait in the backlog, not in SYN retries (default 5)
S((me["host"], int(me["port"])), H).serve_forever()
"""
)


def package(root: Path, math_placement: dict, agent_placement: dict | None = None, agent: str = AGENT) -> Path:
    return write_fixture_package(
        root,
        {
            "acme_math": {"resources_servers": {"acme_math": {"domain": "math", "placement": math_placement}}},
            "acme_agent": {
                "responses_api_agents": {
                    "acme_agent": {
                        "resources_server": {"type": "resources_servers", "name": "acme_math"},
                        "placement": agent_placement or {"num_cpus": 0.25},
                    }
                }
            },
        },
        apps={"acme_math": RESOURCES, "acme_agent": agent},
    )


def rows(n: int) -> list[dict]:
    return [{"agent_ref": {"type": "responses_api_agents", "name": "acme_agent"}, "i": i} for i in range(n)]


def start(cluster: LocalRayCluster, pkg: Path, tmp: Path):
    proc = up_process(
        pkg, tmp, "--placement", "ray", "--ray-address", cluster.address, "--shutdown-grace", "2", env=cluster.env
    )
    return proc, json.loads(read_ready_line(proc, timeout=900))


def stop(proc) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    finally:
        kill_tree(proc)


def throughput(cluster: LocalRayCluster, tmp: Path, replicas: int, n_rows: int) -> tuple[float, dict]:
    pkg = package(tmp / f"pkg{replicas}", {"num_cpus": 0.25, "replicas": replicas})
    proc, info = start(cluster, pkg, tmp / f"run{replicas}")
    try:
        head = info["head_server"]
        with httpx.Client(trust_env=False, timeout=600) as c:
            c.post(head + "/rollouts/run", json={"examples": rows(8)})  # warm connections
            t0 = time.perf_counter()
            out = c.post(head + "/rollouts/run", json={"examples": rows(n_rows)}).json()
            took = time.perf_counter() - t0
            ok = sum(1 for r in out["results"] if r.get("reward") == 1.0)
            where = {i["process_name"]: i.get("node_id", "")[:8] for i in c.get(head + "/server_instances").json()}
        assert ok == n_rows, out["results"][:3]
        return n_rows / took, where
    finally:
        stop(proc)


def agent_throughput(
    cluster: LocalRayCluster, tmp: Path, replicas: int, n_rows: int, hold_ms: int
) -> tuple[float, dict]:
    """rollouts/s through N agent replicas (1.5 CPUs each: one per worker) that hold each ``/run``
    ``hold_ms``, and the batch's ``summary``."""
    agent = SLOW_AGENT.replace("HOLD_S = 0.05", f"HOLD_S = {hold_ms / 1000}")
    pkg = package(
        tmp / f"pkg-agent{replicas}-{hold_ms}", {"num_cpus": 0.25}, {"num_cpus": 1.5, "replicas": replicas}, agent
    )
    proc, info = start(cluster, pkg, tmp / f"run-agent{replicas}-{hold_ms}")
    try:
        with httpx.Client(trust_env=False, timeout=600) as c:
            c.post(info["head_server"] + "/rollouts/run", json={"examples": rows(8)})  # warm connections
            t0 = time.perf_counter()
            out = c.post(info["head_server"] + "/rollouts/run", json={"examples": rows(n_rows)}).json()
            took = time.perf_counter() - t0
        ok = sum(1 for r in out["results"] if r.get("reward") == 1.0)
        assert ok == n_rows, out["results"][:3]
        return n_rows / took, out["summary"]
    finally:
        stop(proc)


def timeline(proc, t0: list[float], lines: list[str]) -> threading.Thread:
    """Copy the daemon's progress lines (stderr; not the dying raylet's state dump Ray forwards)
    into ``lines``, stamped in seconds since ``t0[0]`` once it is set (the moment the raylet is
    killed): where the recovery time goes."""

    def read() -> None:
        for line in proc.stderr:
            if t0 and line.startswith("["):
                lines.append(f"  +{time.perf_counter() - t0[0]:6.2f}s {line.rstrip()[:160]}")

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def node_loss(cluster: LocalRayCluster, tmp: Path) -> tuple[float, float, str, list[str]]:
    pkg = package(tmp / "pkg-loss", {"num_cpus": 1.5})  # only a worker (2 CPUs) fits, not the head (1 CPU)
    proc, info = start(cluster, pkg, tmp / "run-loss")
    try:
        head, url = info["head_server"], info["servers"]["acme_math"]
        table = {i["process_name"]: i for i in httpx.get(head + "/server_instances", trust_env=False).json()}
        first = table["acme_math"]["node_id"]
        name = next(n for n, i in cluster.node_ids.items() if i == first)
        mark: list[float] = []
        lines: list[str] = []
        timeline(proc, mark, lines)
        time.sleep(1)  # the start-up lines are read (and not kept) first
        t0 = time.perf_counter()
        mark.append(t0)
        cluster.kill_raylet(name)
        seen = answered = None
        with httpx.Client(trust_env=False, timeout=2) as c:
            while answered is None and time.perf_counter() - t0 < 300:
                now = {i["process_name"]: i for i in c.get(head + "/server_instances").json()}["acme_math"]
                if seen is None and now["state"] != "ready":
                    seen = time.perf_counter() - t0
                if seen is not None:
                    try:
                        if c.get(url + "/").status_code == 200 and c.post(url + "/verify", json={}).status_code == 200:
                            answered = time.perf_counter() - t0
                    except httpx.HTTPError:
                        pass
                time.sleep(0.05)
        time.sleep(0.5)
        return seen or -1.0, answered or -1.0, name, lines
    finally:
        stop(proc)


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "native-quickstart"
EXAMPLE_ROWS = [
    json.loads(x) for x in (EXAMPLE.parent / "native-quickstart.jsonl").read_text().splitlines() if x.strip()
]


def burner() -> list[subprocess.Popen]:
    """One busy-looping Python per core, at this process's priority, as the cluster's (the CPU a
    training job's own work takes)."""
    return [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(os.cpu_count() or 2)]


def all_back(head: str, servers: dict[str, str], lost_id: str, t0: float, within_s: float = 300) -> float:
    """Seconds since ``t0`` until every instance is ready on a live node and every address answers."""
    with httpx.Client(trust_env=False, timeout=5) as c:
        while time.perf_counter() - t0 < within_s:
            try:
                table = c.get(head + "/server_instances").json()
                if all(t["state"] == "ready" and t.get("node_id") not in (None, lost_id) for t in table) and all(
                    c.get(url + "/").status_code < 500 for url in servers.values()
                ):
                    return time.perf_counter() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    return -1.0


def example_loss(cluster: LocalRayCluster, tmp: Path, run: str, burn: bool) -> tuple[float, int, str, list[str]]:
    """One loss of the worker hosting most of the bundled example's replicas: seconds until every
    listed address answers again, rows scored after it (of :data:`EXAMPLE_ROWS`), the load average
    at the kill, the daemon's lines since the kill."""
    proc, info = start(cluster, EXAMPLE, tmp / f"run-example-{run}")
    burners: list[subprocess.Popen] = []
    try:
        head, servers = info["head_server"], info["servers"]
        table = httpx.get(head + "/server_instances", trust_env=False).json()
        names = {i: n for n, i in cluster.node_ids.items()}
        hosted = {n: sum(names.get(t.get("node_id")) == n for t in table) for n in ("a", "b")}
        worker = max(hosted, key=lambda n: hosted[n])
        mark: list[float] = []
        lines: list[str] = []
        timeline(proc, mark, lines)
        if burn:
            burners = burner()
        time.sleep(5)  # the start-up lines are read (and not kept); the burner at full speed; the spares warm
        load = "%.1f" % os.getloadavg()[0]
        lost_id = cluster.node_ids[worker]
        t0 = time.perf_counter()
        mark.append(t0)
        cluster.kill_raylet(worker)
        took = all_back(head, servers, lost_id, t0)
        out = httpx.post(head + "/rollouts/run", json={"examples": EXAMPLE_ROWS}, trust_env=False, timeout=600).json()
        scored = sum(isinstance(r.get("reward"), float) and not r.get("error") for r in out["results"])
        return took, scored, f"{load}, {hosted[worker]} replicas lost", lines
    finally:
        for b in burners:
            b.kill()
            b.wait()
        stop(proc)
        cluster.ensure_all()


def bytecode_note() -> str:
    """What a Ray worker compiles at each start on this host: without Ray's bytecode in the venv and
    with ``PYTHONDONTWRITEBYTECODE`` set, every worker compiles Ray's modules (about 1.3 CPU-s more)."""
    import ray

    cached = any((Path(ray.__file__).parent / "_private" / "__pycache__").glob("*.pyc"))
    if cached:
        return "Ray's bytecode: compiled in this venv"
    return (
        "Ray's bytecode: NOT compiled in this venv"
        + (" and PYTHONDONTWRITEBYTECODE is set" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "")
        + ": every Ray worker compiles Ray's modules (./uvw sync --compile-bytecode, as CI does)"
    )


def example_losses(cluster: LocalRayCluster, tmp: Path, runs: int, modes: list[str]) -> None:
    print(bytecode_note(), flush=True)
    for mode in modes:
        took_all, slowest = [], (0.0, [])
        for i in range(runs):
            took, scored, how, lines = example_loss(cluster, tmp, f"{mode}{i}", mode == "on")
            took_all.append(took)
            if slowest[0] >= 0 and (took > slowest[0] or took < 0):  # a run that never came back is kept
                slowest = (took, lines)
            print(
                f"example node loss, burner {mode}, run {i + 1}: every listed address answered again after "
                + (f"{took:.1f}s" if took >= 0 else "never (300 s)")
                + f" (goal < 10 s); rows scored after it {scored}/{len(EXAMPLE_ROWS)}; load at the "
                f"kill {how}",
                flush=True,
            )
        ok = [t for t in took_all if t >= 0] or [-1.0]
        print(
            f"example node loss, burner {mode}: median {statistics.median(ok):.1f}s, range {min(ok):.1f}-"
            f"{max(ok):.1f}s, within 10 s in {sum(0 <= t < 10 for t in took_all)} of {runs}; the slowest run's lines:",
            flush=True,
        )
        print("\n".join(slowest[1]), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=120, help="rows per measurement (default 120)")
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--agent-replicas", type=int, nargs="+", default=[1, 2], choices=[1, 2])
    ap.add_argument(
        "--agent-hold-ms",
        type=int,
        nargs="+",
        default=[50, 200],
        help="how long an agent replica holds each /run (default 50 and 200 ms)",
    )
    ap.add_argument("--skip", nargs="+", default=[], choices=["resources", "agents", "node-loss"])
    ap.add_argument("--loss-runs", type=int, default=0, help="losses of the bundled example's busiest worker (4.)")
    ap.add_argument("--burner", nargs="+", default=["off", "on"], choices=["off", "on"], help="for --loss-runs")
    args = ap.parse_args()
    cluster = LocalRayCluster()
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as d:
        tmp = Path(d)
        try:
            t0 = time.perf_counter()
            cluster.start(
                {"a": {"num_cpus": 2, "resources": {"node_a": 1}}, "b": {"num_cpus": 2, "resources": {"node_b": 1}}}
            )
            print(f"cluster: head + 2 workers on 127.0.0.1 in {time.perf_counter() - t0:.1f}s", flush=True)
            base = None
            for n in [] if "resources" in args.skip else args.replicas:
                rate, where = throughput(cluster, tmp, n, args.rows * n)
                base = base or rate
                nodes = ", ".join(f"{k}@{v}" for k, v in sorted(where.items()) if k.startswith("acme_math"))
                print(
                    f"replicas={n}: {rate:6.1f} rollouts/s  ({rate / base:.2f} x the 1-replica figure; goal >= "
                    f"{0.8 * n:.1f} x)  [{nodes}]",
                    flush=True,
                )
            for hold in [] if "agents" in args.skip else args.agent_hold_ms:
                base = None
                for n in args.agent_replicas:
                    rate, summary = agent_throughput(cluster, tmp, n, args.rows * n, hold)
                    base = base or rate
                    counts = ", ".join(f"{r['replica']}@{r['node']}: {r['rollouts']}" for r in summary["replicas"])
                    print(
                        f"agent replicas={n}, {hold} ms a /run: {rate:6.1f} rollouts/s ({rate / base:.2f} x; the "
                        f"head's own figure {summary['rollouts_per_s']}/s at concurrency {summary['concurrency']})"
                        f"  [{counts}]",
                        flush=True,
                    )
            if "node-loss" not in args.skip:
                seen, answered, name, lines = node_loss(cluster, tmp)
                print(
                    f"node loss (worker {name}, raylet SIGKILLed): seen after {seen:.2f}s (goal < 5 s), the stable "
                    f"address answered again after {answered:.2f}s (goal < 10 s); the daemon's lines:",
                    flush=True,
                )
                print("\n".join(lines), flush=True)
            if args.loss_runs:
                example_losses(cluster, tmp, args.loss_runs, args.burner)
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
