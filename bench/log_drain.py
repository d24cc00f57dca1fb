"""Bench the daemon's log drain against ``\\r`` progress bars; prints figures, asserts nothing.

    ./uvw run python bench/log_drain.py [--mb 1 10 100] [--idle 10]

For each size, ``gym-runtime up`` of a small package whose resources server, once the daemon is
ready and the bench says so (a file it creates beside the server's ``app.py``), writes that many
MB of ~80-byte tqdm-style ``\\r`` redraws to stderr without ending the line, then one line saying it
is done, then keeps one bar redrawing every 0.1 s (``tests/helpers/progress.py``, the bar of case
C51). Printed per run: the daemon's own CPU seconds from the go to the moment its tail shows the
done line (the drain of those MB), that per MB, its CPU over ``--idle`` seconds afterwards (the
bar ticking), its RSS before the bar, after it and after the idle time, the log files' size, and
the bytes answered by ``GET /servers/acme_math/logs?tail=3`` and ``gym-runtime logs acme_math``
(default 100 lines). Targets: CPU per MB flat from 1 to 100 MB, RSS flat, both answers a few KB.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.helpers.daemon import simple_env  # noqa: E402
from tests.helpers.progress import DONE, progress_bar_app  # noqa: E402


def cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def one(mb: float, tmp: Path, idle: float) -> dict:
    pkg = simple_env(tmp / f"pkg-{mb:g}")
    app = pkg / "resources_servers/acme_math/app.py"
    app.write_text(progress_bar_app(mb, go_file="go") + app.read_text())
    env = {**os.environ, "GYM_RUNTIME_HOME": str(tmp / "home")}
    work = tmp / f"run-{mb:g}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gym_runtime.cli.main", "up", str(pkg), "--work-dir", str(work)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"up exited {proc.wait()} without a ready line (logs: {work / 'logs'})")
        head = json.loads(line)["head_server"]
        daemon = psutil.Process(proc.pid)
        cpu0, rss0 = cpu(daemon), daemon.memory_info().rss
        t0 = time.monotonic()
        (app.parent / "go").touch()
        while True:  # the daemon's tail shows the done line once every byte before it was drained
            lines = httpx.get(f"{head}/servers/acme_math/logs?tail=5", timeout=60, trust_env=False).json()["lines"]
            if DONE in lines:
                break
            time.sleep(0.2)
        wall, cpu_bar, rss_bar = time.monotonic() - t0, cpu(daemon) - cpu0, daemon.memory_info().rss
        time.sleep(idle)
        cpu1 = cpu(daemon)
        time.sleep(idle)
        cpu_idle, rss_idle = cpu(daemon) - cpu1, daemon.memory_info().rss
        api = httpx.get(f"{head}/servers/acme_math/logs?tail=3", timeout=60, trust_env=False).content
        cli = subprocess.run(
            [sys.executable, "-m", "gym_runtime.cli.main", "logs", "acme_math"],
            env=env,
            capture_output=True,
            timeout=120,
        ).stdout
        log = work / "logs/acme_math.log"
        size = sum(p.stat().st_size for p in (log, log.with_name(log.name + ".1")) if p.exists())
        return {
            "mb": mb,
            "wall": wall,
            "cpu_bar": cpu_bar,
            "cpu_idle": cpu_idle,
            "rss0": rss0 / 2**20,
            "rss_bar": rss_bar / 2**20,
            "rss_idle": rss_idle / 2**20,
            "log_bytes": size,
            "api_bytes": len(api),
            "cli_bytes": len(cli),
            "cli_lines": cli.count(b"\n"),
        }
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, nargs="+", default=[1, 10, 100])
    ap.add_argument("--idle", type=float, default=10.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        one(0.1, tmp, 0)  # builds (or reuses) the venvs: not shown
        load = os.getloadavg()[0]
        rows = [one(mb, tmp, args.idle) for mb in args.mb]
    print(f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print(
        f"| bar MB | drained in | daemon CPU for the bar | CPU per MB | CPU over {args.idle:g} s after "
        "| RSS before -> after bar -> idle | log files | /servers/acme_math/logs?tail=3 | `logs acme_math` |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mb']:g} | {r['wall']:.1f} s | {r['cpu_bar']:.2f} s | {r['cpu_bar'] / r['mb']:.3f} s "
            f"| {r['cpu_idle']:.2f} s | {r['rss0']:.1f} -> {r['rss_bar']:.1f} -> {r['rss_idle']:.1f} MB "
            f"| {r['log_bytes']:,} B | {r['api_bytes']:,} B | {r['cli_bytes']:,} B, {r['cli_lines']} lines |"
        )


if __name__ == "__main__":
    main()
