"""The private Ray head's share of a running environment: prints figures, asserts nothing.

    ./uvw run python bench/ray_head.py [--runs N] [--settle S] [--work DIR]

Starts the real NeMo Gym 0.4.0 package (three server trees from the PyPI wheel, all Ray drivers,
one private Ray head; tests/helpers/gym_package.py) once to build its venv and learn its bytecode,
waits for the daemon to compile what was learned, then N times: start, wait for the ready line and
``S`` seconds more (default 5), read ``GET /processes``, stop by SIGINT. Printed per run: each Ray
process by component with RSS, PSS (MiB) and CPU seconds since it started (user + system, plus
what the head's root process reaped: a ``ray start`` that exits after starting the cluster), the
Ray total, the tree's total by role, and the stop time. Then medians over the runs. Run it in a
private pid namespace on a shared host (``unshare -pf --mount-proc``) so another user's Ray is
never in view. CPU seconds and memory are the figures on a loaded host; wall times need the load
average printed next to them.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.stops import gym_rows  # noqa: E402
from bench.up import learned_users, tree  # noqa: E402
from tests.helpers.daemon import running  # noqa: E402


def cpu_s(pid: int, root: bool) -> float:
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return t.user + t.system + ((t.children_user + t.children_system) if root else 0.0)


def parent(pid: int) -> int | None:
    try:
        return psutil.Process(pid).ppid()
    except psutil.Error:
        return None


def one_run(pkg: Path, work: Path, env: dict[str, str], args: tuple[str, ...], settle: float) -> dict:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gym_runtime.cli.main", "up", str(pkg), "--work-dir", str(work), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        env={**os.environ, **env},
    )
    line = proc.stdout.readline()
    if not line:
        proc.wait()
        return {"error": f"no ready line (exit {proc.returncode}; logs: {work / 'logs'})"}
    info = json.loads(line)
    time.sleep(settle)
    body = httpx.get(info["head_server"] + "/processes", trust_env=False, timeout=30).json()
    rows = body["processes"]
    ray = [r for r in rows if r["role"] == "ray"]
    pids_ray = {r["pid"] for r in ray}
    roots = {r["pid"] for r in ray if parent(r["pid"]) not in pids_ray}
    for r in ray:
        r["cpu_s"] = cpu_s(r["pid"], r["pid"] in roots)
    load = os.getloadavg()[0]
    pids = [p.pid for p in tree(proc.pid)]
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    code = proc.wait(60)
    took = time.monotonic() - t0
    time.sleep(1)
    left = sum(running(p) for p in pids)
    return {"ray": ray, "by_role": body["by_role"], "stop_s": took, "exit": code, "left": left, "load": load}


def main() -> None:
    argv = sys.argv[1:]
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 3
    settle = float(argv[argv.index("--settle") + 1]) if "--settle" in argv else 5.0
    # --work DIR: reuse an earlier run's directory (its venvs), e.g. to compare two versions of the code
    work = (
        Path(argv[argv.index("--work") + 1])
        if "--work" in argv
        else Path(tempfile.mkdtemp(prefix="gym-runtime-rayhead-"))
    )
    venvs = work / "venvs"
    env = {"GYM_RUNTIME_HOME": str(work / "home"), "GYM_RUNTIME_VENV_DIR": str(venvs)}
    pkg, _, _, genv, args = gym_rows(work)
    env.update(genv)
    for attempt in range(3):  # a loaded 2-core host can time Ray's start-up out (Ray's own 30 s limit)
        first = one_run(pkg, work / f"learn{attempt}-{os.getpid()}", env, args, 0.0)
        if "error" not in first:
            break
        print(f"learning run {attempt + 1}: {first['error']}")
    else:
        raise SystemExit("no learning run reached ready")
    # the learning run stopped at ready: start once more so the daemon harvests the learning dirs
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gym_runtime.cli.main",
            "up",
            str(pkg),
            "--work-dir",
            str(work / f"harvest-{os.getpid()}"),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        env={**os.environ, **env},
    )
    proc.stdout.readline()
    t0 = time.monotonic()
    while learned_users(venvs)[0] < 4 and time.monotonic() - t0 < 300:
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    proc.wait(60)
    print(f"bytecode learned for {learned_users(venvs)[0]} processes; {runs} measured runs, settle {settle:g} s")
    per: dict[str, list[tuple[float, float, float]]] = {}
    totals, stops = [], []
    for i in range(runs):
        r = one_run(pkg, work / f"run{i}-{os.getpid()}", env, args, settle)
        if "error" in r:
            print(f"run {i + 1}: {r['error']}")
            continue
        by_comp: dict[str, list[float]] = {}
        for row in r["ray"]:
            acc = by_comp.setdefault(row["component"], [0.0, 0.0, 0.0, 0])
            acc[0] += row["rss_mb"]
            acc[1] += row["pss_mb"] or 0.0
            acc[2] += row["cpu_s"]
            acc[3] += 1
        print(f"run {i + 1} (load average {r['load']:.1f}):")
        for comp, (rss, pss, cpu, n) in sorted(by_comp.items(), key=lambda kv: -kv[1][0]):
            print(f"  {comp:20s} x{n}  RSS {rss:6.1f}  PSS {pss:6.1f}  CPU {cpu:5.2f} s")
            per.setdefault(comp, []).append((rss, pss, cpu))
        ray_tot = (
            sum(v[0] for v in by_comp.values()),
            sum(v[1] for v in by_comp.values()),
            sum(v[2] for v in by_comp.values()),
            sum(v[3] for v in by_comp.values()),
        )
        tree_rss = sum(v["rss_mb"] for v in r["by_role"].values())
        tree_pss = sum(v["pss_mb"] or 0.0 for v in r["by_role"].values())
        print(
            f"  Ray total: {ray_tot[3]} processes, RSS {ray_tot[0]:.0f}, PSS {ray_tot[1]:.0f}, CPU {ray_tot[2]:.2f} s"
        )
        print(
            "  tree by role: "
            + ", ".join(f"{k} {v['rss_mb']:.0f}/{(v['pss_mb'] or 0):.0f}" for k, v in sorted(r["by_role"].items()))
            + f"; total RSS {tree_rss:.0f}, PSS {tree_pss:.0f} MiB"
        )
        print(f"  stop (SIGINT): {r['stop_s']:.2f} s, exit {r['exit']}, processes left {r['left']}")
        totals.append((*ray_tot[:3], tree_rss, tree_pss))
        stops.append(r["stop_s"])
    if totals:
        med = [statistics.median(t[k] for t in totals) for k in range(5)]
        print(
            f"medians over {len(totals)} runs: Ray RSS {med[0]:.0f}, PSS {med[1]:.0f}, CPU {med[2]:.2f} s; "
            f"tree RSS {med[3]:.0f}, PSS {med[4]:.0f} MiB; stop min {min(stops):.2f}, "
            f"median {statistics.median(stops):.2f}, max {max(stops):.2f} s"
        )
        for comp, vals in sorted(per.items()):
            print(
                f"  {comp:20s} RSS {statistics.median(v[0] for v in vals):6.1f}  "
                f"PSS {statistics.median(v[1] for v in vals):6.1f}  CPU {statistics.median(v[2] for v in vals):5.2f} s"
            )


if __name__ == "__main__":
    main()
