"""Run INSIDE the runtime image, under its init: ``gym-runtime up ARGS`` started and stopped N times.

    tini -- python3 up_cycles.py --cycles 20 examples/native-quickstart [more up arguments]

Each cycle starts ``up``, waits for its ready line (stdout), counts the processes PID 1 has adopted
(``adopted``: orphans, this script aside), sends SIGTERM and waits for the exit. After the last
cycle (and a settle time for the init to reap), prints ONE JSON line:
``{"cycles": [{"code", "startup_s", "isolation", "adopted", "wall_s"}], "zombies": [...], "others": [...]}``;
``zombies`` are processes in state Z, ``others`` every other live process that is neither PID 1
nor this script (a stopped ``up`` leaves nothing running). Uses only the image's own Python and psutil.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import psutil


def one_cycle(up_args: list[str], stop_timeout_s: float) -> dict:
    t0 = time.monotonic()
    proc = subprocess.Popen(
        ["gym-runtime", "up", *up_args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    line = proc.stdout.readline()  # the ready line, or '' when up exits first
    ready = json.loads(line) if line.strip() else {}
    adopted = sum(
        1 for p in psutil.process_iter(["ppid"]) if p.info["ppid"] == 1 and p.pid not in (os.getpid(), proc.pid)
    )
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(stop_timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    return {
        "code": code,
        "startup_s": ready.get("startup_s"),
        "isolation": ready.get("isolation"),
        "adopted": adopted,
        "wall_s": round(time.monotonic() - t0, 2),
    }


def describe(p: psutil.Process) -> dict:
    """pid, ppid, status and command line (empty for a zombie, which has none left to read)."""
    with p.oneshot():
        try:
            cmdline = " ".join(p.cmdline())[:200]
        except psutil.ZombieProcess:
            cmdline = ""
        return {"pid": p.pid, "ppid": p.ppid(), "status": p.status(), "cmdline": cmdline}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--settle", type=float, default=1.0, help="seconds to let the init reap before counting")
    ap.add_argument("--stop-timeout", type=float, default=60.0)
    ap.add_argument("up_args", nargs=argparse.REMAINDER, help="the package and any other `up` arguments")
    args = ap.parse_args()
    cycles = []
    for _ in range(args.cycles):
        cycles.append(one_cycle(args.up_args, args.stop_timeout))
        print(json.dumps(cycles[-1]), file=sys.stderr, flush=True)
    time.sleep(args.settle)
    me = os.getpid()
    procs = []
    for p in psutil.process_iter():
        try:
            if p.pid not in (1, me):
                procs.append(describe(p))
        except psutil.NoSuchProcess:
            continue
    zombies = [p for p in procs if p["status"] == psutil.STATUS_ZOMBIE]
    others = [p for p in procs if p["status"] != psutil.STATUS_ZOMBIE]
    print(json.dumps({"cycles": cycles, "zombies": zombies, "others": others}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
