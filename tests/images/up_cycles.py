"""Run INSIDE the runtime image, under its init: ``gym-runtime up PKG`` started and stopped N times.

    tini -- python3 up_cycles.py --cycles 20 examples/native-quickstart

Each cycle starts ``up``, waits for its ready line (stdout), sends SIGTERM and waits for the exit.
After the last cycle (and a settle time for the init to reap), prints ONE JSON line:
``{"cycles": [{"code", "startup_s", "isolation", "wall_s"}], "zombies": [...], "others": [...]}``;
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


def one_cycle(package: str, ready_timeout_s: float) -> dict:
    t0 = time.monotonic()
    proc = subprocess.Popen(["gym-runtime", "up", package], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    line = proc.stdout.readline()  # the ready line, or '' when up exits first
    ready = json.loads(line) if line.strip() else {}
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(ready_timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    return {"code": code, "startup_s": ready.get("startup_s"), "isolation": ready.get("isolation"),
            "wall_s": round(time.monotonic() - t0, 2)}


def describe(p: psutil.Process) -> dict:
    with p.oneshot():
        return {"pid": p.pid, "ppid": p.ppid(), "status": p.status(), "cmdline": " ".join(p.cmdline())[:200]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("package")
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--settle", type=float, default=1.0, help="seconds to let the init reap before counting")
    ap.add_argument("--stop-timeout", type=float, default=60.0)
    args = ap.parse_args()
    cycles = []
    for _ in range(args.cycles):
        cycles.append(one_cycle(args.package, args.stop_timeout))
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
