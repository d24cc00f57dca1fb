"""Bench the bundled example under both sandbox backends: prints figures, asserts nothing.

    ./uvw run python bench/backends.py [--rounds 3] [--rows 24] [--concurrency 4]

Starts the same real OpenSandbox server the tests use (``tests/helpers/opensandbox/server.py``:
opensandbox-server from PyPI on podman's Docker API, the locally made sandbox image and the test
stand-in for execd; needs root and podman), then runs ``gym-runtime up examples/native-quickstart``
(built-in stub model as policy) under ``local`` and under ``opensandbox``, one start of each per
round, alternating, all with one ``GYM_RUNTIME_HOME`` (so one set of venvs, built by an uncounted
first start of each backend). Per start:

- **time to ready**: wall seconds from spawning ``up`` to its ready line, and the daemon's own
  ``startup_s``; the median over the rounds is printed;
- **memory at ready** (RSS, MiB): the daemon process; its whole process tree (stub model, and under
  ``local`` the servers); the OpenSandbox server's process tree and podman's API service (the
  server's own cost, shared by every run it serves); per sandbox (named by the servers in it) the sum
  over the processes in its container, and over all sandboxes by role: the servers, execd, the
  runtime's forwarder and launchers, the rest
  (``conmon`` outside the container not counted); RSS sums count shared pages once per process.
  under ``local``, ``servers`` sums each server's process tree (the pid ``/server_instances`` gives);
- **``/run`` latency**: ``--rows`` rows of the example at ``--concurrency``, once through the head
  server's ``POST /rollouts/run`` (per-row latency the head server reports) and once straight to
  each agent's ``/run`` at the address the ready line gives (under ``opensandbox``: the daemon's
  relay in front of the agent's sandbox); p50 and p90 over the rounds' rows, after a warm-up of
  the example's 6 rows straight to the agents;
- **exit seen**: the ``arithmetic`` server is SIGKILLed (under ``opensandbox`` by a command run in
  its sandbox, which records the kill's time there; under ``local`` by ``kill(2)`` from this host),
  and the figure is the daemon's ``last_exit.at`` minus that time: the kill command's own latency
  is not in it. The bench then waits for the restart before it stops the run.

The host's cores, load average (start and end) and the server's version are printed: on a shared
host, figures are comparable only at a similar load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.daemon import kill_tree, read_ready_line, up_process  # noqa: E402
from tests.helpers.load import example_rows, instance, percentile, run_batch, run_direct, wait_state  # noqa: E402
from tests.helpers.opensandbox.runs import EXAMPLE, ROLES, daemon_env, kill_server_inside, sandbox_rss  # noqa: E402

BACKENDS = ("local", "opensandbox")
KILLED = "arithmetic"
MIB = 2**20


def tree_rss(pid: int | None) -> int:
    """Bytes of RSS of process ``pid`` and all its descendants (0 when it is gone)."""
    if pid is None:
        return 0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def memory(server, proc, head: str, backend: str) -> dict[str, float]:
    """The memory figures at ready (module doc), MiB."""
    out = {"daemon": psutil.Process(proc.pid).memory_info().rss / MIB, "daemon tree": tree_rss(proc.pid) / MIB}
    instances = httpx.get(head + "/server_instances", timeout=30, trust_env=False).json()
    if backend == "local":
        out["servers"] = sum(tree_rss(s["pid"]) for s in instances) / MIB
    else:
        out["opensandbox-server"] = tree_rss(server.process.pid) / MIB
        out["podman service"] = tree_rss(server.podman_process.pid) / MIB
        names: dict[str, list[str]] = {}  # sandbox id -> the servers in it (a group's sandbox holds several)
        for s in instances:
            names.setdefault(s["sandbox"], []).append(s["process_name"])
        boxes = {"+".join(n): sandbox_rss(server, sid) for sid, n in names.items()}
        out["sandboxes"] = sum(sum(b.values()) for b in boxes.values()) / MIB
        for role in ROLES:
            out[f"sandboxes' {role}"] = sum(b[role] for b in boxes.values()) / MIB
        out.update({f"sandbox {k}": sum(b.values()) / MIB for k, b in sorted(boxes.items())})
    return out


def latencies(info: dict, rows: int, concurrency: int) -> tuple[list[float], list[float]]:
    """Per-row seconds through ``/rollouts/run`` and straight to the agents' ``/run`` (module doc)."""
    head = info["head_server"]
    run_direct(info["servers"], example_rows(6), concurrency)  # warm-up: every agent, connection pools
    batch = run_batch(head, example_rows(rows), concurrency)
    direct = run_direct(info["servers"], example_rows(rows), concurrency)
    for run in (batch, direct):
        failed = [r for r in run.results if not isinstance(r.get("reward"), (int, float))]
        if failed:
            print(f"  {len(failed)} row(s) not scored, e.g. {json.dumps(failed[0])[:300]}")
    return [x for x in batch.latency_s if x is not None], [x for x in direct.latency_s if x is not None]


def exit_seen(server, head: str, backend: str) -> float:
    """Kill :data:`KILLED` (module doc); seconds from the kill to the daemon's ``last_exit.at``.
    Waits for the restarted server to be ready again."""
    before = instance(head, KILLED)
    if backend == "opensandbox":
        killed = kill_server_inside(server, before["sandbox"], KILLED)
    else:
        os.kill(before["pid"], signal.SIGKILL)
        killed = time.time()
    deadline = time.monotonic() + 60
    while True:
        me = instance(head, KILLED)
        if (me.get("last_exit") or {}).get("at", 0) > killed - 5 and me["restarts"] > before["restarts"]:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"{KILLED} was not seen to exit in 60 s: {me}")
        time.sleep(0.05)
    wait_state(head, KILLED, "ready", timeout=120)
    return me["last_exit"]["at"] - killed


def one_start(server, home: Path, work: Path, backend: str, args: argparse.Namespace, measure: bool) -> dict:
    """One ``up`` under ``backend``: its figures (only time to ready unless ``measure``), then stop."""
    t0 = time.monotonic()
    proc = up_process(EXAMPLE, work, env=daemon_env(server, home, backend))
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # drained: a full pipe would block the daemon
    try:
        info = json.loads(read_ready_line(proc, timeout=900))
        fig: dict = {"wall": time.monotonic() - t0, "startup_s": info["startup_s"]}
        if measure:
            fig["memory"] = memory(server, proc, info["head_server"], backend)
            fig["batch"], fig["direct"] = latencies(info, args.rows, args.concurrency)
            fig["exit_seen"] = exit_seen(server, info["head_server"], backend)
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        return fig
    finally:
        kill_tree(proc)


def report(backend: str, figs: list[dict]) -> None:
    med = statistics.median
    walls = [f["wall"] for f in figs]
    print(
        f"{backend}: time to ready (median of {len(figs)}): {med(walls):.2f} s wall "
        f"({', '.join(f'{x:.2f}' for x in walls)}), {med(f['startup_s'] for f in figs):.2f} s in the daemon"
    )
    mem = {k: med(f["memory"][k] for f in figs) for k in figs[0]["memory"]}
    print(f"{backend}: memory at ready (median, MiB): " + ", ".join(f"{k} {v:.0f}" for k, v in mem.items()))
    for label in ("batch", "direct"):
        pooled = [x for f in figs for x in f[label]]
        where = "/rollouts/run (head server)" if label == "batch" else "agents' /run"
        print(
            f"{backend}: {where}: p50 {1000 * percentile(pooled, 0.5):.0f} ms, p90 "
            f"{1000 * percentile(pooled, 0.9):.0f} ms over {len(pooled)} rows"
        )
    seen = [f["exit_seen"] for f in figs]
    print(
        f"{backend}: server killed -> exit seen: median {med(seen):.2f} s, max {max(seen):.2f} s "
        f"({', '.join(f'{x:.2f}' for x in seen)})",
        flush=True,
    )


def main() -> None:
    from tests.helpers.debian_base import BaseUnavailable
    from tests.helpers.opensandbox.images import ensure_images
    from tests.helpers.opensandbox.server import OpenSandboxUnavailable, running_server

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", type=int, default=24, help="rows per latency phase per start (default %(default)s)")
    ap.add_argument("--concurrency", type=int, default=4)
    args = ap.parse_args()
    load0 = os.getloadavg()
    print(
        f"host: {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.1f} GiB, {platform.machine()}; "
        f"load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}",
        flush=True,
    )
    if os.geteuid() != 0:
        raise SystemExit("needs root: the OpenSandbox server runs on rootful podman's Docker API")
    try:
        images = ensure_images()
    except (BaseUnavailable, OpenSandboxUnavailable) as e:
        raise SystemExit(f"the OpenSandbox server cannot run here: {e}") from e
    work = Path(tempfile.mkdtemp(prefix="gym-runtime-bench-backends-"))  # under an allowed host path
    with running_server(images.sandbox, images.execd) as server:
        print(f"opensandbox-server {server.version} up in {server.start_seconds[0]:.1f} s", flush=True)
        for backend in BACKENDS:
            first = one_start(server, work / "home", work / f"first-{backend}", backend, args, measure=False)
            print(f"{backend}: first start (venvs built or reused), uncounted: {first['wall']:.2f} s", flush=True)
        figs: dict[str, list[dict]] = {b: [] for b in BACKENDS}
        for i in range(args.rounds):
            for backend in BACKENDS:
                figs[backend].append(one_start(server, work / "home", work / f"{backend}-{i}", backend, args, True))
                f = figs[backend][-1]
                print(
                    f"round {i + 1} {backend}: ready {f['wall']:.2f} s, exit seen {f['exit_seen']:.2f} s; "
                    f"load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
        for backend in BACKENDS:
            report(backend, figs[backend])
    shutil.rmtree(work, ignore_errors=True)
    load1 = os.getloadavg()
    print(f"load average at the end: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")


if __name__ == "__main__":
    main()
