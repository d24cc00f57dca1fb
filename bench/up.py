"""Bench ``gym-runtime up`` (issue 5): prints figures, asserts nothing.

    python3 -m uv run python bench/up.py [PKG]      # default: examples/native-quickstart

Figures: time-to-ready with venvs cached (the first run builds or reuses them; uv cache warm),
memory (RSS) of the whole process tree at ready, daemon RSS and idle CPU over 5 s, crash
detection latency (SIGKILL a server's app, time until the head server reports it), shutdown
time after SIGTERM once ready and in the middle of start-up, and processes left afterwards.
Targets: cached start < 3 s, crash seen < 1 s, shutdown < 1.5 s with nothing left, idle CPU < 1 %,
daemon RSS < 150 MB.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]


def launch(pkg: Path, work: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gym_runtime.cli.main", "up", str(pkg), "--work-dir", str(work)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)


def tree(pid: int) -> list[psutil.Process]:
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.Error:
        return []


def stop(proc: subprocess.Popen) -> tuple[float, int]:
    """SIGTERM; seconds until the daemon exited; how many of its processes are left 1 s later."""
    pids = [p.pid for p in tree(proc.pid)]
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    took = time.monotonic() - t0
    time.sleep(1)
    return took, sum(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)


def main() -> None:
    pkg = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "examples/native-quickstart").resolve()
    work = Path("/tmp/gym-runtime-bench")
    print(f"package: {pkg}")
    warm = launch(pkg, work / "warm")  # builds or reuses the venvs
    warm.stdout.readline()
    stop(warm)

    t0 = time.monotonic()
    proc = launch(pkg, work / "run")
    info = json.loads(proc.stdout.readline())
    wall = time.monotonic() - t0
    print(f"time-to-ready, venvs cached: {info['startup_s']:.2f} s in the daemon, {wall:.2f} s wall "
          f"(isolation {info['isolation']})")
    procs = tree(proc.pid)
    rss = sum(p.memory_info().rss for p in procs if p.is_running())
    print(f"process tree at ready: {len(procs)} processes, {rss / 2**20:.0f} MB RSS")
    daemon = psutil.Process(proc.pid)
    daemon.cpu_percent(None)
    time.sleep(5)
    print(f"daemon idle: {daemon.cpu_percent(None):.2f} % CPU over 5 s, {daemon.memory_info().rss / 2**20:.0f} MB RSS")

    head = httpx.Client(base_url=info["head_server"], trust_env=False)
    name, pid = next((s["name"], s["pid"]) for s in head.get("/server_instances").json() if s["kind"] == "server")
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    while next(s for s in head.get("/server_instances").json() if s["name"] == name)["status"] == "ready":
        time.sleep(0.002)
    print(f"crash detection ({name} SIGKILLed): {1000 * (time.monotonic() - t0):.1f} ms until the head reports it")
    while head.get("/health").status_code != 200:
        time.sleep(0.05)
    took, left = stop(proc)
    print(f"shutdown after SIGTERM once ready: {took:.2f} s, processes left: {left}")

    for delay, phase in ((0.4, "config / venv check"), (1.2, "servers starting")):
        proc = launch(pkg, work / f"mid{delay}")
        time.sleep(delay)
        took, left = stop(proc)
        print(f"shutdown after SIGTERM {delay:.1f} s into start-up ({phase}): {took:.2f} s, processes left: {left}")


if __name__ == "__main__":
    main()
